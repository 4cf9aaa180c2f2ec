#include "services/sharding/commit_log.h"

#include <endian.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace antdt::sharding {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat("commit log ", path, ": ", what, ": ", strerror(errno)));
}

void Store32(char* p, uint32_t v) {
  v = htole32(v);
  std::memcpy(p, &v, sizeof(v));
}
void Store64(char* p, uint64_t v) {
  v = htole64(v);
  std::memcpy(p, &v, sizeof(v));
}
uint32_t Load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return le32toh(v);
}
uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return le64toh(v);
}

uint32_t Checksum(uint64_t seq, std::string_view payload) {
  char seq_bytes[8];
  Store64(seq_bytes, seq);
  uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(seq_bytes), sizeof(seq_bytes));
  crc =
      crc32(crc, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size()));
  return static_cast<uint32_t>(crc);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CommitLog>> CommitLog::Open(const std::string& path, size_t capacity,
                                                           bool sync) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open", path);
  std::unique_ptr<CommitLog> log(new CommitLog(fd, path, capacity, sync));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Errno("stat", path);
  if (static_cast<size_t>(st.st_size) < capacity) {
    // Zeros written for real: an overwrite then syncs only the data.
    const std::string zeros(1 << 20, '\0');
    for (size_t at = static_cast<size_t>(st.st_size); at < capacity; at += zeros.size()) {
      const size_t n = std::min(zeros.size(), capacity - at);
      if (::pwrite(fd, zeros.data(), n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) {
        return Errno("preallocate", path);
      }
    }
    if (::fsync(fd) != 0) return Errno("fsync", path);
  }
  return log;
}

CommitLog::~CommitLog() { ::close(fd_); }

absl::StatusOr<std::vector<CommitLog::Record>> CommitLog::ReadAfter(uint64_t after) const {
  std::vector<Record> out;
  size_t at = 0;
  uint64_t prev = 0;
  bool first = true;
  char header[kHeaderBytes];
  while (at + kHeaderBytes <= capacity_) {
    if (::pread(fd_, header, kHeaderBytes, static_cast<off_t>(at)) !=
        static_cast<ssize_t>(kHeaderBytes)) {
      return Errno("read", path_);
    }
    const uint32_t length = Load32(header);
    const uint32_t crc = Load32(header + 4);
    const uint64_t seq = Load64(header + 8);
    if (length == 0 || length > capacity_ - at - kHeaderBytes) break;
    if (!first && seq != prev + 1) break;
    std::string payload(length, '\0');
    if (::pread(fd_, payload.data(), length, static_cast<off_t>(at + kHeaderBytes)) !=
        static_cast<ssize_t>(length)) {
      return Errno("read", path_);
    }
    if (Checksum(seq, payload) != crc) break;
    if (first && seq > after + 1) {
      return absl::DataLossError(absl::StrCat("commit log ", path_, ": its first record is ", seq,
                                              " but the database holds records up to ", after));
    }
    first = false;
    prev = seq;
    at += kHeaderBytes + length;
    if (seq > after) out.push_back(Record{seq, std::move(payload)});
  }
  return out;
}

absl::Status CommitLog::Append(uint64_t seq, std::string_view payload) {
  if (payload.empty() || !Fits(payload.size())) {
    return absl::InternalError(absl::StrCat("commit log ", path_, ": a record of ", payload.size(),
                                            " bytes does not fit at offset ", offset_));
  }
  buffer_.resize(kHeaderBytes + payload.size());
  Store32(buffer_.data(), static_cast<uint32_t>(payload.size()));
  Store32(buffer_.data() + 4, Checksum(seq, payload));
  Store64(buffer_.data() + 8, seq);
  std::memcpy(buffer_.data() + kHeaderBytes, payload.data(), payload.size());
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::pwrite(fd_, buffer_.data() + done, buffer_.size() - done,
                               static_cast<off_t>(offset_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("write", path_);
    done += static_cast<size_t>(n);
  }
  if (sync_ && ::fdatasync(fd_) != 0) return Errno("fdatasync", path_);
  offset_ += buffer_.size();
  return absl::OkStatus();
}

}  // namespace antdt::sharding
