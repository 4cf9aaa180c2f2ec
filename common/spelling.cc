#include "common/spelling.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace antdt {

size_t EditDistance(absl::string_view a, absl::string_view b) {
  // Three rows of the dynamic programme: i - 2, i - 1 and i.
  std::vector<size_t> before(b.size() + 1), last(b.size() + 1), row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) last[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    const char ai = absl::ascii_tolower(a[i - 1]);
    for (size_t j = 1; j <= b.size(); ++j) {
      const char bj = absl::ascii_tolower(b[j - 1]);
      row[j] = std::min({last[j] + 1, row[j - 1] + 1, last[j - 1] + (ai == bj ? 0 : 1)});
      if (i > 1 && j > 1 && ai == absl::ascii_tolower(b[j - 2]) &&
          absl::ascii_tolower(a[i - 2]) == bj) {
        row[j] = std::min(row[j], before[j - 2] + 1);
      }
    }
    std::swap(before, last);
    std::swap(last, row);
  }
  return last[b.size()];
}

std::optional<std::string> NearestName(absl::string_view text,
                                       const std::vector<std::string>& candidates) {
  const size_t limit = std::clamp<size_t>(text.size() / 3, 1, 2);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    if (c == text) return std::nullopt;
    const size_t d = EditDistance(text, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string DidYouMean(absl::string_view text, const std::vector<std::string>& candidates,
                       absl::string_view prefix) {
  const std::optional<std::string> nearest = NearestName(text, candidates);
  return nearest ? absl::StrCat("; did you mean \"", prefix, *nearest, "\"?") : "";
}

}  // namespace antdt
