// The sharding store's commit log: a group commit is one record written to a
// preallocated file and synced (one pwrite, one fdatasync), and the rows reach
// the SQLite database later, many commits to a transaction, off the answer's
// path (services/sharding/sqlite_store.h).
//
// A record: payload length (u32), CRC-32 of the sequence number and payload
// (u32), sequence number (u64), payload; little-endian. Sequence numbers go up
// by one per record. Records are written from the start of the file, one after
// the other; Rewind() starts again at the start once every record written is
// held elsewhere (the database), so the file never grows and a sync never has
// a file size or a block allocation to write. The records that count are the
// chain read from the start: each whole (its checksum holds) and numbered one
// after the one before. Whatever follows the chain (a torn record, the
// remains of older rounds, zeros) has a bad checksum or a smaller number.
// Not thread-safe: one writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace antdt::sharding {

class CommitLog {
 public:
  static constexpr size_t kHeaderBytes = 16;

  // Opens `path`, creating it as `capacity` bytes of zeros (written and synced,
  // not a sparse file). `sync`: fdatasync after each record; without it a
  // record survives the process, not the machine.
  static absl::StatusOr<std::unique_ptr<CommitLog>> Open(const std::string& path, size_t capacity,
                                                         bool sync);
  ~CommitLog();

  struct Record {
    uint64_t seq = 0;
    std::string payload;
  };
  // The chain from the start of the file, without the records numbered
  // `after` or lower. An error when the chain starts above `after` + 1 (a
  // record the caller does not hold is missing).
  absl::StatusOr<std::vector<Record>> ReadAfter(uint64_t after) const;

  // Whether a record of `payload_bytes` fits after the last one written.
  bool Fits(size_t payload_bytes) const {
    return offset_ + kHeaderBytes + payload_bytes <= capacity_;
  }
  // Writes record `seq` (non-empty payload, Fits()) after the last, durable
  // (with `sync`) on return.
  absl::Status Append(uint64_t seq, std::string_view payload);
  // The next record is written at the start of the file. Only once every
  // record written is held elsewhere: the chain then starts at the next one.
  void Rewind() { offset_ = 0; }
  size_t offset() const { return offset_; }
  size_t capacity() const { return capacity_; }

 private:
  CommitLog(int fd, std::string path, size_t capacity, bool sync)
      : fd_(fd), path_(std::move(path)), capacity_(capacity), sync_(sync) {}

  const int fd_;
  const std::string path_;
  const size_t capacity_;
  const bool sync_;
  size_t offset_ = 0;
  std::string buffer_;  // the record being written
};

}  // namespace antdt::sharding
