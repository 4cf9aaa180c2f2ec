#include "backends/local/progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace antdt::local {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ProgressFigures Busy() {
  ProgressFigures f;
  f.committed = 1'234'567;
  f.total = 10'000'000;
  f.epoch = 3;
  f.epochs = 12;
  f.records_per_second = 123'456;
  f.eta_seconds = 7'200;
  f.stragglers = 3;
  f.actions = 1;
  f.rebalances = 37;
  return f;
}

TEST(ProgressLine, EverythingWhenItFits) {
  const std::string line = ProgressLine(Busy(), 200);
  EXPECT_EQ(line,
            "[##......................]   12%  epoch 3/12  1234567/10000000 records  123456 rec/s  "
            "ETA 7200 s  stragglers 3  1 action, 37 rebalances");
}

TEST(ProgressLine, NeverWiderThanTheTerminal) {
  for (int width = 1; width <= 200; ++width) {
    EXPECT_LE(ProgressLine(Busy(), width).size(), static_cast<size_t>(width)) << width;
    EXPECT_LE(ProgressLine(ProgressFigures{}, width).size(), static_cast<size_t>(width)) << width;
  }
}

TEST(ProgressLine, An80ColumnTerminalKeepsTheFiguresThatMatter) {
  const std::string line = ProgressLine(Busy(), 79);
  EXPECT_LE(line.size(), 79u) << line;
  EXPECT_THAT(line, HasSubstr("12%"));
  EXPECT_THAT(line, HasSubstr("epoch 3/12"));
  EXPECT_THAT(line, HasSubstr("stragglers 3"));
  EXPECT_THAT(line, HasSubstr("1 action"));
  EXPECT_THAT(line, HasSubstr("123456 rec/s"));
  EXPECT_THAT(line, Not(HasSubstr("rebalances")));
  // Narrower still: the percentage stays, then only it.
  EXPECT_THAT(ProgressLine(Busy(), 40), HasSubstr("12%"));
  EXPECT_EQ(ProgressLine(Busy(), 4), " 12%");
}

TEST(ProgressLine, CountsActionsAndRebalancesApart) {
  ProgressFigures f = Busy();
  f.actions = 2;
  f.rebalances = 1;
  EXPECT_THAT(ProgressLine(f, 200), HasSubstr("2 actions, 1 rebalance"));
  f.rebalances = 0;
  EXPECT_THAT(ProgressLine(f, 200), Not(HasSubstr("rebalance")));
}

TEST(ProgressLine, CompensatedStragglersAreCountedAndNamed) {
  ProgressFigures f = Busy();
  f.compensated = 2;
  EXPECT_THAT(ProgressLine(f, 200), HasSubstr("stragglers 3 (2 compensated)"));
  // Given up before the bar narrows; the count stays.
  const std::string narrow = ProgressLine(f, 79);
  EXPECT_LE(narrow.size(), 79u) << narrow;
  EXPECT_THAT(narrow, HasSubstr("stragglers 3"));
}

// Once actions are listed, the line is long: the ETA is what a user waits
// for, and is kept over the records, the rebalances and the bar's width.
TEST(ProgressLine, TheEtaOutlastsTheLessUsefulFigures) {
  ProgressFigures f = Busy();
  f.actions = 12;
  f.compensated = 2;
  for (int width : {60, 70, 79, 90, 100}) {
    const std::string line = ProgressLine(f, width);
    EXPECT_LE(line.size(), static_cast<size_t>(width)) << line;
    EXPECT_THAT(line, HasSubstr("ETA 7200 s")) << width;
    EXPECT_THAT(line, HasSubstr("12 act")) << width;
  }
  const std::string line = ProgressLine(f, 79);
  EXPECT_THAT(line, HasSubstr("stragglers 3"));
  EXPECT_THAT(line, HasSubstr("123456 rec/s"));
  EXPECT_THAT(line, Not(HasSubstr("records")));
  // The ETA goes only after the pace and the epoch.
  const std::string narrow = ProgressLine(f, 44);
  EXPECT_THAT(narrow, HasSubstr("ETA 7200 s")) << narrow;
  EXPECT_THAT(narrow, Not(HasSubstr("rec/s"))) << narrow;
}

TEST(WrapLine, ALineThatFitsComesBackAsItIs) {
  EXPECT_THAT(WrapLine("8.6 s KILL_RESTART worker-5: slow", 80),
              ::testing::ElementsAre("8.6 s KILL_RESTART worker-5: slow"));
  EXPECT_THAT(WrapLine("", 80), ::testing::ElementsAre(""));
  EXPECT_THAT(WrapLine("abcd", 4), ::testing::ElementsAre("abcd"));
}

TEST(WrapLine, BreaksAtSpacesWithAnIndentedContinuation) {
  EXPECT_THAT(WrapLine("7.2 s ADJUST_BS worker-2: TRANSIENT worker (score 2.97)", 30),
              ::testing::ElementsAre("7.2 s ADJUST_BS worker-2:", "    TRANSIENT worker (score",
                                     "    2.97)"));
  // An indented line's continuation is indented further.
  EXPECT_THAT(WrapLine("    cause CPU_CONTENTION, score 2.55, saves ~3.4 s", 28),
              ::testing::ElementsAre("    cause CPU_CONTENTION,", "        score 2.55, saves",
                                     "        ~3.4 s"));
}

TEST(WrapLine, EveryLineFitsAndNoWordIsLostOrBroken) {
  std::string line = "12.4 s KILL_RESTART worker-5:";
  for (int i = 0; i < 30; ++i) line += " persistent straggler (score 3.1)";
  for (int width = 1; width <= 300; ++width) {
    std::string joined;
    for (const std::string& piece : WrapLine(line, width)) {
      EXPECT_LE(piece.size(), static_cast<size_t>(width)) << width << ": " << piece;
      if (width >= 40) {  // every word fits a line: none is cut
        EXPECT_NE(piece.back(), ' ');
        absl::StrAppend(&joined, joined.empty() ? "" : " ",
                        absl::StripLeadingAsciiWhitespace(piece));
      }
    }
    if (width >= 40) {
      EXPECT_EQ(joined, line) << width;
    }
  }
  // A word longer than a line is cut, not lost.
  EXPECT_THAT(WrapLine("a 0123456789abcdef", 8),
              ::testing::ElementsAre("a", "    0123", "    4567", "    89ab", "    cdef"));
}

TEST(RebalanceLine, SaysWhenAndWhatTheGlobalBatchIsKeptFor) {
  EXPECT_EQ(RebalanceLine(7.24, {"worker-2's ADJUST_BS"}, {"worker-0->77", "worker-1->77"}),
            "7.2 s global batch kept (for worker-2's ADJUST_BS): worker-0->77 worker-1->77");
  EXPECT_EQ(
      RebalanceLine(12, {"worker-2's ADJUST_BS", "worker-5's KILL_RESTART"}, {"worker-0->70"}),
      "12.0 s global batch kept (for worker-2's ADJUST_BS, worker-5's KILL_RESTART): "
      "worker-0->70");
  EXPECT_EQ(RebalanceLine(30.06, {}, {"worker-0->60", "worker-3->68"}),
            "30.1 s global batch kept (batches in proportion to speed): worker-0->60 "
            "worker-3->68");
}

TEST(TerminalColumns, ColumnsVariableThen80WithoutATerminal) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  setenv("COLUMNS", "132", 1);
  EXPECT_EQ(TerminalColumns(fds[1]), 132);
  setenv("COLUMNS", "wide", 1);
  EXPECT_EQ(TerminalColumns(fds[1]), 80);
  unsetenv("COLUMNS");
  EXPECT_EQ(TerminalColumns(fds[1]), 80);
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace antdt::local
