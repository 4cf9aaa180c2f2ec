// "Did you mean": the valid name nearest to a misspelt one, for the errors of
// every edge that reads names (manifest fields, scenario fields, command-line
// flags, policy names and other enumerated values). Pure; links only Abseil.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace antdt {

// The optimal string alignment distance of `a` and `b` (Levenshtein's
// insertions, deletions and substitutions, and swaps of two adjacent
// characters), ASCII letters compared without case: "replcias" is 1 from
// "replicas", "ShardSize" 0 from "shardSize".
size_t EditDistance(absl::string_view a, absl::string_view b);

// The name of `candidates` nearest to `text` when it is near enough to be a
// slip of the keyboard: at most 1 edit for a `text` of up to 5 characters, 2
// for a longer one (a third of the length, between 1 and 2). Of equally near
// names, the first; nullopt when none is near or `text` is one of them.
std::optional<std::string> NearestName(absl::string_view text,
                                       const std::vector<std::string>& candidates);

// `; did you mean "NAME"?` with NAME the NearestName of `text` (`prefix`
// before it: "--" for flags), else "": what an error appends after its
// `<field>: unknown field`.
std::string DidYouMean(absl::string_view text, const std::vector<std::string>& candidates,
                       absl::string_view prefix = "");

}  // namespace antdt
