#include "operator/local/progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

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
