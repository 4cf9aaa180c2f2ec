// The ledger's datasets as specified: names and sizes checked, the shard
// layout and the shuffled order, a dataset's first epoch (ledger_internal.h).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/sharding/ledger_internal.h"

namespace antdt::sharding {

ShardLayout LayoutOf(const v1::DatasetSpec& spec, int64_t records, int64_t max_shards) {
  ShardLayout out;
  const int64_t size_max = spec.shard_size();
  if (spec.min_shard_records() <= 0 || spec.workers() <= 0 || size_max <= 0) {
    out.full = records / size_max + (records % size_max != 0);
    return out;
  }
  const int64_t floor = std::min(spec.min_shard_records(), size_max);
  const int64_t parts = 2 * static_cast<int64_t>(spec.workers());
  // Shards of shard_size while ceil(left / parts) >= shard_size.
  int64_t full = 0;
  if (records / parts >= size_max) full = (records - parts * (size_max - 1)) / size_max;
  full = std::clamp<int64_t>(full, 0, records / size_max);
  out.full = full;
  int64_t pos = full * size_max;
  while (pos < records && out.count() <= max_shards) {
    out.tail.push_back(pos);
    const int64_t left = records - pos;
    int64_t size = std::clamp(left / parts + (left % parts != 0), floor, size_max);
    if (left - size < floor) size = std::min(left, size_max);
    pos += size;
  }
  out.tail.push_back(records);
  return out;
}

std::vector<int64_t> Permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  uint64_t state = seed;
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(SplitMix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

absl::Status ValidateName(const std::string& value, const std::string& field, size_t max_bytes) {
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": must not be empty"));
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", value.size(), " bytes, more than the limit of ", max_bytes));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must not contain control characters (byte 0x",
                       absl::Hex(c, absl::kZeroPad2), " at offset ", i, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateJob(const std::string& job, const std::string& field) {
  RETURN_IF_ERROR(ValidateName(job, field));
  if (job.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must not contain '/'"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRef(const v1::DatasetRef& ref, bool name_optional) {
  RETURN_IF_ERROR(ValidateJob(ref.job(), "dataset.job"));
  if (name_optional && ref.name().empty()) return absl::OkStatus();
  return ValidateName(ref.name(), "dataset.name");
}

absl::StatusOr<int64_t> RecordsOf(const v1::DatasetSpec& spec) {
  if (spec.files_size() == 0) {
    if (spec.record_count() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.record_count: must be > 0 (or give spec.files), got ", spec.record_count()));
    }
    return spec.record_count();
  }
  int64_t sum = 0;
  for (int i = 0; i < spec.files_size(); ++i) {
    const v1::DataFile& f = spec.files(i);
    const std::string field = absl::StrCat("spec.files[", i, "]");
    RETURN_IF_ERROR(ValidateName(f.path(), field + ".path", kMaxPathBytes));
    if (f.records() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".records: must be > 0, got ", f.records()));
    }
    if (__builtin_add_overflow(sum, f.records(), &sum)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".records: the sum of spec.files[].records passes 2^63-1 at this file"));
    }
  }
  if (spec.record_count() != 0 && spec.record_count() != sum) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.record_count: ", spec.record_count(),
                     " differs from the sum of spec.files[].records (", sum, ")"));
  }
  return sum;
}

int64_t MaxSliceBytes(const v1::DatasetSpec& spec) {
  constexpr int64_t kSliceOverhead = 32;  // tags, lengths, offset and count varints
  int64_t largest = 0;
  int64_t shard = -1;  // the shard whose slices `bytes` counts
  int64_t bytes = 0;
  int64_t start = 0;
  for (const v1::DataFile& f : spec.files()) {
    const int64_t slice = kSliceOverhead + static_cast<int64_t>(f.path().size());
    const int64_t first = start / spec.shard_size();
    const int64_t last = (start + f.records() - 1) / spec.shard_size();
    if (first != shard) bytes = 0;
    bytes += slice;
    largest = std::max(largest, bytes);
    if (last != first) bytes = slice;  // the file's last shard starts with it
    shard = last;
    start += f.records();
  }
  return largest;
}

absl::Status ValidateSizes(const v1::DatasetSpec& spec, int64_t records) {
  if (spec.shard_size() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.shard_size: must be > 0, got ", spec.shard_size()));
  }
  if (spec.epochs() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.epochs: must be > 0, got ", spec.epochs()));
  }
  int64_t total = 0;
  if (__builtin_mul_overflow(records, static_cast<int64_t>(spec.epochs()), &total)) {
    return absl::InvalidArgumentError(absl::StrCat("spec.epochs: ", records, " records x ",
                                                   spec.epochs(), " epochs passes 2^63-1"));
  }
  if (spec.min_shard_records() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.min_shard_records: must be >= 0 (0: no guided layout), got ",
                     spec.min_shard_records()));
  }
  if (spec.workers() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.workers: must be >= 0, got ", spec.workers()));
  }
  const int64_t shards = LayoutOf(spec, records, kMaxShardsPerDataset).count();
  if (shards > kMaxShardsPerDataset) {
    const bool guided = spec.min_shard_records() > 0 && spec.workers() > 0;
    return absl::InvalidArgumentError(absl::StrCat(
        guided ? "spec.min_shard_records: the guided layout of " : "spec.shard_size: ",
        guided ? absl::StrCat(spec.workers(), " workers") : absl::StrCat(spec.shard_size()),
        " gives more than ", kMaxShardsPerDataset, " shards, the limit"));
  }
  const int64_t largest_shard = std::min(spec.shard_size(), records);
  if (spec.shuffle() && largest_shard > kMaxShuffledShardSize) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "spec.shard_size: shuffled shards of ", largest_shard, " records, more than the limit ",
        kMaxShuffledShardSize, " (each AcquireShard answer lists a shuffled shard's record ids)"));
  }
  if (!spec.shuffle() && MaxSliceBytes(spec) > kMaxAnswerBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("spec.files: a shard's file slices take ", MaxSliceBytes(spec),
                     " bytes in an AcquireShard answer, more than the limit ", kMaxAnswerBytes,
                     " (a smaller spec.shard_size covers fewer files)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateSpec(const v1::DatasetSpec& spec, int64_t* records) {
  RETURN_IF_ERROR(ValidateJob(spec.job(), "spec.job"));
  RETURN_IF_ERROR(ValidateName(spec.name(), "spec.name"));
  ASSIGN_OR_RETURN(*records, RecordsOf(spec));
  return ValidateSizes(spec, *records);
}

std::string DescribeDifferences(const v1::DatasetSpec& a, const v1::DatasetSpec& b) {
  std::vector<std::string> diffs;
  auto add = [&](const char* field, const auto& x, const auto& y) {
    if (x != y) diffs.push_back(absl::StrCat(field, " ", x, " (existing) vs ", y, " (requested)"));
  };
  add("record_count", a.record_count(), b.record_count());
  add("shard_size", a.shard_size(), b.shard_size());
  add("epochs", a.epochs(), b.epochs());
  add("shuffle", a.shuffle(), b.shuffle());
  add("seed", a.seed(), b.seed());
  add("min_shard_records", a.min_shard_records(), b.min_shard_records());
  add("workers", a.workers(), b.workers());
  if (a.files_size() != b.files_size()) {
    add("files (count)", a.files_size(), b.files_size());
  } else {
    for (int i = 0; i < a.files_size(); ++i) {
      if (a.files(i).path() != b.files(i).path() || a.files(i).records() != b.files(i).records()) {
        diffs.push_back(absl::StrCat("files[", i, "] differ"));
      }
    }
  }
  return absl::StrJoin(diffs, ", ");
}

void InitDataset(Ledger::Dataset& ds) {
  int64_t records = 0;
  ds.file_starts.clear();
  for (const v1::DataFile& f : ds.spec.files()) {
    ds.file_starts.push_back(records);
    records += f.records();
  }
  if (ds.spec.files_size() == 0) records = ds.spec.record_count();
  ds.records = records;
  ds.layout = LayoutOf(ds.spec, records, kMaxShardsPerDataset);
  ds.shard_count = ds.layout.count();
}

}  // namespace antdt::sharding
