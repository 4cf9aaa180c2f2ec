// The progress bar of `antdt run`: one line that fits the terminal, and the
// event lines above it wrapped to fit it too. Pure but for TerminalColumns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace antdt::local {

struct ProgressFigures {
  int64_t committed = 0;  // records, over every epoch
  int64_t total = 0;      // records x epochs
  int epoch = 1;          // 1-based
  int epochs = 1;
  double records_per_second = 0;
  double eta_seconds = -1;  // < 0: unknown
  int stragglers = 0;       // in the Monitor's last view, compensated ones included
  int compensated = 0;      // of those, the ones a smaller batch compensates for
  int actions = 0;          // the actions the terminal lists
  int rebalances = 0;       // batch changes that only keep the global batch
};

// The bar and the figures in at most `width` columns: the full line when it
// fits, else shorter forms, a narrower bar and fewer figures; the ETA is kept
// to the last but the bar and the percentage.
std::string ProgressLine(const ProgressFigures& figures, int width);

// An event line (an action, its evidence, ...) as lines of at most `width`
// columns for a terminal: broken at spaces, a word longer than a line cut;
// continuation lines indented four columns past the line's own indentation
// (at most half the width). A line that fits comes back as it is.
std::vector<std::string> WrapLine(const std::string& line, int width);

// The event line of one plan's batch changes that only keep the global batch,
// with the plan's time and the actions they keep it for:
// "7.2 s global batch kept (for worker-2's ADJUST_BS): worker-0->77 worker-1->77";
// a plan with no other action (a round sizing every worker by its speed)
// says "(batches in proportion to speed)".
std::string RebalanceLine(double at_seconds, const std::vector<std::string>& for_actions,
                          const std::vector<std::string>& changes);

// The terminal's width: TIOCGWINSZ on `fd`, else $COLUMNS, else 80.
int TerminalColumns(int fd);

}  // namespace antdt::local
