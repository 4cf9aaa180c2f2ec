#include "services/sharding/commit_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/testing/testing.h"

namespace antdt::sharding {
namespace {

constexpr size_t kCapacity = 4096;

std::unique_ptr<CommitLog> OpenLog(const std::string& path) {
  auto log = CommitLog::Open(path, kCapacity, /*sync=*/true);
  EXPECT_TRUE(log.ok()) << log.status();
  return std::move(*log);
}

std::vector<uint64_t> Seqs(const CommitLog& log, uint64_t after) {
  auto records = log.ReadAfter(after);
  EXPECT_TRUE(records.ok()) << records.status();
  std::vector<uint64_t> out;
  for (const auto& r : *records) out.push_back(r.seq);
  return out;
}

TEST(CommitLog, ReadsBackTheRecordsAfterTheOnesHeldElsewhere) {
  antdt::testing::TempDir dir;
  {
    auto log = OpenLog(dir.File("log"));
    for (uint64_t seq = 1; seq <= 5; ++seq) {
      ASSERT_TRUE(log->Append(seq, "batch " + std::to_string(seq)).ok());
    }
  }
  auto log = OpenLog(dir.File("log"));  // reopened: nothing kept in memory
  auto records = log->ReadAfter(2);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 3u);
  EXPECT_EQ((*records)[0].seq, 3u);
  EXPECT_EQ((*records)[0].payload, "batch 3");
  EXPECT_EQ((*records)[2].payload, "batch 5");
  EXPECT_TRUE(Seqs(*log, 5).empty());
}

// A record cut short by a crash, or bytes that were never a record, end the
// chain: what follows is not read.
TEST(CommitLog, ATornRecordEndsTheChain) {
  antdt::testing::TempDir dir;
  size_t third = 0;
  {
    auto log = OpenLog(dir.File("log"));
    ASSERT_TRUE(log->Append(1, "one").ok());
    ASSERT_TRUE(log->Append(2, "two").ok());
    third = log->offset();
    ASSERT_TRUE(log->Append(3, "three").ok());
    ASSERT_TRUE(log->Append(4, "four").ok());
  }
  const int fd = ::open(dir.File("log").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "X", 1, static_cast<off_t>(third + CommitLog::kHeaderBytes + 2)), 1);
  ::close(fd);
  EXPECT_EQ(Seqs(*OpenLog(dir.File("log")), 0), (std::vector<uint64_t>{1, 2}));
}

// After a rewind the new records overwrite the old from the start; the older
// ones left further on are never read as part of the chain.
TEST(CommitLog, ARewoundLogReadsOnlyTheNewRound) {
  antdt::testing::TempDir dir;
  auto log = OpenLog(dir.File("log"));
  for (uint64_t seq = 1; seq <= 20; ++seq) {
    ASSERT_TRUE(log->Append(seq, std::string(40, 'a')).ok());
  }
  log->Rewind();  // records 1..20 are held elsewhere now
  ASSERT_TRUE(log->Append(21, "short").ok());
  ASSERT_TRUE(log->Append(22, std::string(10, 'b')).ok());
  EXPECT_EQ(Seqs(*log, 20), (std::vector<uint64_t>{21, 22}));
  EXPECT_EQ(Seqs(*log, 21), (std::vector<uint64_t>{22}));
  // Rewound with nothing written since: old records only, all held.
  log->Rewind();
  EXPECT_TRUE(Seqs(*log, 22).empty());
}

TEST(CommitLog, AMissingRecordIsDataLossNotSilence) {
  antdt::testing::TempDir dir;
  auto log = OpenLog(dir.File("log"));
  ASSERT_TRUE(log->Append(7, "seven").ok());
  auto records = log->ReadAfter(3);  // the holder has 1..3: 4..6 are gone
  ASSERT_FALSE(records.ok());
  EXPECT_EQ(records.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(records.status().message().find("first record is 7"), std::string::npos);
}

TEST(CommitLog, ARecordThatDoesNotFitIsRefused) {
  antdt::testing::TempDir dir;
  auto log = OpenLog(dir.File("log"));
  EXPECT_FALSE(log->Fits(kCapacity));
  EXPECT_FALSE(log->Append(1, std::string(kCapacity, 'x')).ok());
  EXPECT_FALSE(log->Append(1, "").ok());
  EXPECT_EQ(log->offset(), 0u);
  EXPECT_TRUE(Seqs(*log, 0).empty());
}

TEST(CommitLog, TheFileIsWrittenToItsSizeOnce) {
  antdt::testing::TempDir dir;
  OpenLog(dir.File("log"));
  struct stat st {};
  ASSERT_EQ(::stat(dir.File("log").c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), kCapacity);
  EXPECT_GE(static_cast<size_t>(st.st_blocks) * 512, kCapacity);  // not sparse
}

}  // namespace
}  // namespace antdt::sharding
