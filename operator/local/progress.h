// The progress bar of `antdt run`: one line that fits the terminal. Pure but
// for TerminalColumns.
#pragma once

#include <cstdint>
#include <string>

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
// fits, else shorter forms, a narrower bar and fewer figures, the bar and the
// percentage last.
std::string ProgressLine(const ProgressFigures& figures, int width);

// The terminal's width: TIOCGWINSZ on `fd`, else $COLUMNS, else 80.
int TerminalColumns(int fd);

}  // namespace antdt::local
