#include "backends/local/progress.h"

#include <sys/ioctl.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace antdt::local {
namespace {

std::string Plural(int n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

// How much of the line is kept; each step of Shorten() gives up a little more.
struct Form {
  int bar = 24;  // 0: no bar
  bool rebalances = true, eta = true, rate = true, epoch = true, records = true;
  bool compensated = true;   // "stragglers 2 (1 compensated)"
  bool records_word = true;  // "12/40 records" rather than "12/40"
  bool long_words = true;    // "stragglers 1" rather than "strag 1"
};

std::string Render(const ProgressFigures& f, const Form& form) {
  const double frac =
      f.total > 0 ? std::clamp(static_cast<double>(f.committed) / f.total, 0.0, 1.0) : 0.0;
  std::vector<std::string> parts;
  if (form.bar > 0) {
    const int filled = static_cast<int>(frac * form.bar);
    parts.push_back(
        absl::StrCat("[", std::string(filled, '#'), std::string(form.bar - filled, '.'), "]"));
  }
  parts.push_back(absl::StrFormat("%3.0f%%", frac * 100));
  if (form.epoch && f.epochs > 1) {
    parts.push_back(absl::StrFormat(form.long_words ? "epoch %d/%d" : "e%d/%d", f.epoch, f.epochs));
  }
  if (form.records) {
    parts.push_back(absl::StrCat(f.committed, "/", f.total, form.records_word ? " records" : ""));
  }
  if (form.rate) parts.push_back(absl::StrFormat("%.0f rec/s", f.records_per_second));
  if (form.eta && f.eta_seconds >= 0) parts.push_back(absl::StrFormat("ETA %.0f s", f.eta_seconds));
  std::string stragglers = absl::StrCat(form.long_words ? "stragglers " : "strag ", f.stragglers);
  if (form.compensated && f.compensated > 0) {
    absl::StrAppend(&stragglers, " (", f.compensated, " compensated)");
  }
  parts.push_back(stragglers);
  std::string actions =
      form.long_words ? Plural(f.actions, "action", "actions") : absl::StrCat(f.actions, " act");
  if (form.rebalances && f.rebalances > 0) {
    absl::StrAppend(&actions, ", ", Plural(f.rebalances, "rebalance", "rebalances"));
  }
  parts.push_back(actions);
  return absl::StrJoin(parts, "  ");
}

// One step shorter; false when nothing is left to give up. What says least
// goes first: the rebalances (the actions say what was done), the
// compensated count, the record counts (the percentage says what they say),
// bar width; the ETA, what a user waits for, goes last but the bar.
bool Shorten(Form& form) {
  auto drop = [](bool& kept) {
    if (!kept) return false;
    kept = false;
    return true;
  };
  if (drop(form.rebalances) || drop(form.compensated) || drop(form.records_word) ||
      drop(form.records)) {
    return true;
  }
  if (form.bar > 6) {
    form.bar -= 2;
    return true;
  }
  if (drop(form.long_words) || drop(form.rate) || drop(form.epoch) || drop(form.eta)) return true;
  if (form.bar == 0) return false;
  form.bar = 0;
  return true;
}

}  // namespace

std::string ProgressLine(const ProgressFigures& figures, int width) {
  width = std::max(width, 1);
  Form form;
  std::string line = Render(figures, form);
  while (static_cast<int>(line.size()) > width && Shorten(form)) line = Render(figures, form);
  if (static_cast<int>(line.size()) > width) line.resize(width);
  return line;
}

std::string RebalanceLine(double at_seconds, const std::vector<std::string>& for_actions,
                          const std::vector<std::string>& changes) {
  const std::string why = for_actions.empty()
                              ? "batches in proportion to speed"
                              : absl::StrCat("for ", absl::StrJoin(for_actions, ", "));
  return absl::StrFormat("%.1f s global batch kept (%s): %s", at_seconds, why,
                         absl::StrJoin(changes, " "));
}

std::vector<std::string> WrapLine(const std::string& line, int width) {
  const size_t indent = std::min(line.find_first_not_of(' '), line.size());
  // Continuation lines: the line's own indentation and four more, at most half the width.
  const std::string more(std::min<size_t>(indent + 4, std::max(width, 1) / 2), ' ');
  const size_t first = static_cast<size_t>(std::max(width, 1));
  const size_t rest = std::max<size_t>(first - more.size(), 1);
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < line.size()) {
    const size_t room = out.empty() ? first : rest;
    size_t end = pos + room;
    if (line.size() - pos > room) {
      // Break at the last space that fits; a word longer than the room is cut.
      const size_t space = line.rfind(' ', end);
      if (space != std::string::npos && space > pos && (!out.empty() || space > indent)) {
        end = space;
      }
    } else {
      end = line.size();
    }
    std::string piece = line.substr(pos, end - pos);
    if (!out.empty()) piece = more + piece;
    out.push_back(std::move(piece));
    pos = line.find_first_not_of(' ', end);
    if (pos == std::string::npos) break;
  }
  if (out.empty()) out.push_back(line.substr(0, first));
  return out;
}

int TerminalColumns(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  int columns = 0;
  if (const char* env = std::getenv("COLUMNS");
      env != nullptr && absl::SimpleAtoi(env, &columns) && columns > 0) {
    return columns;
  }
  return 80;
}

}  // namespace antdt::local
