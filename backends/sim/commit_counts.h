// How often each record of a simulated run was committed, for its
// exactly-once check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace antdt::sim {

// How often each record of the run was committed: a bit a record (committed
// at least once) and a hash of the rest, which must stay empty. 32 million
// records take 4 MB, not the 32 of a byte each, freshly faulted in by every
// run at 10,000 workers.
class CommitCounts {
 public:
  // Forgets every commit; the run has `records` records (indices below it).
  void Reset(size_t records) {
    size_ = records;
    once_.assign((records + 63) / 64, 0);
    again_.clear();
  }
  // One commit of record `at`; an index past the run's records is ignored.
  void Add(size_t at) {
    if (at >= size_) return;
    uint64_t& word = once_[at / 64];
    const uint64_t bit = uint64_t{1} << (at % 64);
    if ((word & bit) == 0) {
      word |= bit;
    } else {
      ++again_[at];
    }
  }
  int64_t Committed() const {
    int64_t n = 0;
    for (uint64_t word : once_) n += __builtin_popcountll(word);
    return n;
  }
  int64_t Missing() const { return static_cast<int64_t>(size_) - Committed(); }
  int64_t Duplicates() const {
    int64_t n = 0;
    for (const auto& [at, times] : again_) n += times;
    return n;
  }

 private:
  size_t size_ = 0;
  std::vector<uint64_t> once_;
  absl::flat_hash_map<size_t, int64_t> again_;  // record -> commits beyond its first
};

}  // namespace antdt::sim
