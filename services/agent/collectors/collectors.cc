#include "services/agent/collectors/collectors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status.h"

namespace antdt::agent {
namespace {

constexpr char kProcStat[] = "/proc/stat";
constexpr char kMeminfo[] = "/proc/meminfo";
constexpr char kNetDev[] = "/proc/net/dev";

absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status FileError(absl::string_view file, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", message));
}

absl::Status LineError(absl::string_view file, size_t index, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": line ", index + 1, ": ", message));
}

// The lines of a whole file, which must be non-empty and end in a newline.
absl::StatusOr<std::vector<absl::string_view>> Lines(absl::string_view file,
                                                     absl::string_view text) {
  if (text.empty()) return FileError(file, "empty");
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  lines.pop_back();  // after the final newline: empty when the file is whole
  if (!absl::EndsWith(text, "\n")) {
    return LineError(file, lines.size(), "truncated: no newline at the end of the file");
  }
  return lines;
}

std::vector<absl::string_view> Fields(absl::string_view line) {
  return absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
}

absl::Status ParseCounter(absl::string_view file, size_t index, absl::string_view name,
                          absl::string_view field, uint64_t* out) {
  if (!absl::SimpleAtoi(field, out) || absl::StartsWith(field, "-")) {
    return LineError(file, index,
                     absl::StrCat(name, ": \"", field, "\" is not a non-negative integer"));
  }
  return absl::OkStatus();
}

// Whether a line of `lines` starts with `key`.
bool HasKey(const std::vector<absl::string_view>& lines, absl::string_view key) {
  for (absl::string_view line : lines) {
    std::vector<absl::string_view> fields = Fields(line);
    if (!fields.empty() && fields[0] == key) return true;
  }
  return false;
}

// The counters of "key value" lines (cgroup cpu.stat) whose key is in `keys`;
// other keys are ignored. Each of the first `required` keys must be present.
template <size_t N>
absl::Status ParseKeyedCounters(absl::string_view file, const std::vector<absl::string_view>& lines,
                                const std::pair<absl::string_view, uint64_t*> (&keys)[N],
                                size_t required) {
  bool found[N] = {};
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<absl::string_view> fields = Fields(lines[i]);
    if (fields.empty()) continue;
    for (size_t k = 0; k < N; ++k) {
      if (fields[0] != keys[k].first) continue;
      if (fields.size() != 2) {
        return LineError(file, i, absl::StrCat("expected \"", fields[0], " <integer>\""));
      }
      RETURN_IF_ERROR(ParseCounter(file, i, fields[0], fields[1], keys[k].second));
      found[k] = true;
    }
  }
  for (size_t k = 0; k < required; ++k) {
    if (!found[k]) return FileError(file, absl::StrCat("missing ", keys[k].first));
  }
  return absl::OkStatus();
}

absl::StatusOr<CgroupCpuStat> ParseCgroupV2CpuStat(absl::string_view file,
                                                   const std::vector<absl::string_view>& lines) {
  CgroupCpuStat result;
  const std::pair<absl::string_view, uint64_t*> keys[] = {
      {"usage_usec", &result.usage_usec},     {"user_usec", &result.user_usec},
      {"system_usec", &result.system_usec},   {"nr_periods", &result.nr_periods},
      {"nr_throttled", &result.nr_throttled}, {"throttled_usec", &result.throttled_usec},
  };
  // The usage keys; throttling needs the cpu controller.
  RETURN_IF_ERROR(ParseKeyedCounters(file, lines, keys, /*required=*/3));
  return result;
}

absl::StatusOr<CgroupCpuStat> ParseCgroupV1CpuStat(absl::string_view file,
                                                   const std::vector<absl::string_view>& lines) {
  CgroupCpuStat result;
  result.version = CgroupVersion::kV1;
  uint64_t throttled_ns = 0;
  const std::pair<absl::string_view, uint64_t*> keys[] = {
      {"nr_periods", &result.nr_periods},
      {"nr_throttled", &result.nr_throttled},
      {"throttled_time", &throttled_ns},
  };
  RETURN_IF_ERROR(ParseKeyedCounters(file, lines, keys, /*required=*/3));
  result.throttled_usec = throttled_ns / 1000;
  return result;
}

// The one integer of a single-value cgroup file (memory.current,
// cpuacct.usage), non-negative.
template <typename T>
absl::StatusOr<T> ParseSingleInteger(absl::string_view file, absl::string_view text) {
  ASSIGN_OR_RETURN(std::vector<absl::string_view> lines, Lines(file, text));
  std::vector<absl::string_view> fields = Fields(lines[0]);
  if (lines.size() != 1 || fields.size() != 1) {
    return FileError(file, "expected a single integer");
  }
  T value = 0;
  if (!absl::SimpleAtoi(fields[0], &value) || absl::StartsWith(fields[0], "-")) {
    return LineError(file, 0, absl::StrCat("\"", fields[0], "\" is not a non-negative integer"));
  }
  return value;
}

// b - a, or 0 when the counter went backwards.
uint64_t Delta(uint64_t a, uint64_t b) { return b >= a ? b - a : 0; }

template <typename Parse>
auto ReadParsed(FileSource& files, const std::string& path, Parse parse)
    -> decltype(parse(std::string())) {
  ASSIGN_OR_RETURN(std::string text, files.Read(path));
  return parse(text);
}

// The path under `root` when `path` is `logical` or below it.
bool Rebase(absl::string_view path, absl::string_view logical, const std::string& root,
            std::string* real) {
  if (!absl::ConsumePrefix(&path, logical) || !(path.empty() || path[0] == '/')) return false;
  *real = absl::StrCat(root, path);
  return true;
}

void AddError(v1::NodeSample& sample, absl::string_view collector, const absl::Status& status) {
  sample.add_errors(absl::StrCat(collector, ": ", status.message()));
}

// A cgroup file that is absent when its controller or PSI is off: `absent`
// then, without an error.
template <typename T, typename Parse>
T ReadOptional(FileSource& files, const std::string& path, Parse parse, T absent,
               v1::NodeSample& sample) {
  absl::StatusOr<T> value =
      ReadParsed(files, path, [&](std::string_view text) { return parse(text, path); });
  if (value.ok()) return *std::move(value);
  if (!absl::IsNotFound(value.status())) AddError(sample, "cgroup", value.status());
  return absent;
}

// A cgroup's cpu.stat; for a v1 one, usage_usec from the cpuacct.usage next
// to it, or 0 when there is none (cpuacct not mounted with cpu). A cpuacct.usage
// that is there but cannot be read fails the group, as its cpu.stat would:
// a usage of 0 for one sample would read as a counter reset, then a jump.
absl::StatusOr<CgroupCpuStat> ReadCgroupCpu(FileSource& files, const std::string& dir) {
  const std::string stat_file = dir + "/cpu.stat";
  auto parse_stat = [&](std::string_view text) { return ParseCgroupCpuStat(text, stat_file); };
  ASSIGN_OR_RETURN(CgroupCpuStat stat, ReadParsed(files, stat_file, parse_stat));
  if (stat.version != CgroupVersion::kV1) return stat;
  const std::string usage_file = dir + "/cpuacct.usage";
  auto parse_usage = [&](std::string_view text) {
    return ParseCgroupCpuacctUsage(text, usage_file);
  };
  absl::StatusOr<uint64_t> usage_ns = ReadParsed(files, usage_file, parse_usage);
  if (usage_ns.ok()) {
    stat.usage_usec = *usage_ns / 1000;
  } else if (!absl::IsNotFound(usage_ns.status())) {
    return usage_ns.status();
  }
  return stat;
}

}  // namespace

// ---- Parsers ----------------------------------------------------------------

absl::StatusOr<CpuTimes> ParseProcStat(std::string_view input) {
  const absl::string_view text = Absl(input);
  ASSIGN_OR_RETURN(std::vector<absl::string_view> lines, Lines(kProcStat, text));
  std::optional<CpuTimes> times;
  int cpus = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<absl::string_view> fields = Fields(lines[i]);
    if (fields.empty()) continue;
    if (fields[0] == "cpu") {
      constexpr absl::string_view kNames[] = {"user",   "nice", "system",  "idle",
                                              "iowait", "irq",  "softirq", "steal"};
      constexpr size_t kCount = sizeof(kNames) / sizeof(kNames[0]);
      if (fields.size() - 1 < kCount) {
        return LineError(kProcStat, i,
                         absl::StrCat("expected at least ", kCount, " numbers after \"cpu\", got ",
                                      fields.size() - 1));
      }
      CpuTimes t;
      uint64_t* outs[kCount] = {&t.user,   &t.nice, &t.system,  &t.idle,
                                &t.iowait, &t.irq,  &t.softirq, &t.steal};
      for (size_t k = 0; k < kCount; ++k) {
        RETURN_IF_ERROR(ParseCounter(kProcStat, i, kNames[k], fields[k + 1], outs[k]));
      }
      times = t;
    } else if (int n = 0; absl::StartsWith(fields[0], "cpu") &&
                          absl::SimpleAtoi(fields[0].substr(3), &n) && n >= 0) {
      ++cpus;
    }
  }
  if (!times) return FileError(kProcStat, "no \"cpu\" line");
  if (cpus == 0) return FileError(kProcStat, "no per-CPU \"cpuN\" lines");
  times->cpus = cpus;
  return *times;
}

absl::StatusOr<MemInfo> ParseMeminfo(std::string_view input) {
  const absl::string_view text = Absl(input);
  ASSIGN_OR_RETURN(std::vector<absl::string_view> lines, Lines(kMeminfo, text));
  MemInfo info;
  const std::pair<absl::string_view, int64_t*> keys[] = {
      {"MemTotal", &info.total_bytes},
      {"MemAvailable", &info.available_bytes},
      {"SwapTotal", &info.swap_total_bytes},
      {"SwapFree", &info.swap_free_bytes},
  };
  bool found[4] = {false, false, false, false};
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) {
      return LineError(kMeminfo, i, "expected \"Key: value\"");
    }
    absl::string_view key = lines[i].substr(0, colon);
    for (size_t k = 0; k < 4; ++k) {
      if (key != keys[k].first) continue;
      std::vector<absl::string_view> fields = Fields(lines[i].substr(colon + 1));
      uint64_t kb = 0;
      if (fields.size() != 2 || fields[1] != "kB") {
        return LineError(kMeminfo, i, absl::StrCat("expected \"", key, ": <number> kB\""));
      }
      RETURN_IF_ERROR(ParseCounter(kMeminfo, i, key, fields[0], &kb));
      if (kb > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / 1024)) {
        return LineError(kMeminfo, i, absl::StrCat(key, ": ", kb, " kB is out of range"));
      }
      *keys[k].second = static_cast<int64_t>(kb) * 1024;
      found[k] = true;
    }
  }
  for (size_t k = 0; k < 4; ++k) {
    if (!found[k]) return FileError(kMeminfo, absl::StrCat("missing ", keys[k].first));
  }
  return info;
}

absl::StatusOr<std::vector<NetDevCounters>> ParseNetDev(std::string_view input) {
  const absl::string_view text = Absl(input);
  ASSIGN_OR_RETURN(std::vector<absl::string_view> lines, Lines(kNetDev, text));
  if (lines.size() < 2) return FileError(kNetDev, "expected 2 header lines");
  std::vector<NetDevCounters> result;
  for (size_t i = 2; i < lines.size(); ++i) {
    if (Fields(lines[i]).empty()) continue;
    size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) {
      return LineError(kNetDev, i, "expected \"interface: counters\"");
    }
    NetDevCounters dev;
    dev.name = std::string(absl::StripAsciiWhitespace(lines[i].substr(0, colon)));
    if (dev.name.empty()) return LineError(kNetDev, i, "empty interface name");
    dev.loopback = dev.name == "lo";
    std::vector<absl::string_view> fields = Fields(lines[i].substr(colon + 1));
    constexpr size_t kCount = 16;  // 8 receive and 8 transmit columns
    if (fields.size() < kCount) {
      return LineError(kNetDev, i,
                       absl::StrCat("expected at least ", kCount, " numbers after \"", dev.name,
                                    ":\", got ", fields.size()));
    }
    uint64_t values[kCount];
    for (size_t k = 0; k < kCount; ++k) {
      RETURN_IF_ERROR(ParseCounter(kNetDev, i, absl::StrCat(dev.name, " column ", k + 1), fields[k],
                                   &values[k]));
    }
    dev.rx_bytes = values[0];
    dev.rx_packets = values[1];
    dev.rx_errs = values[2];
    dev.rx_drop = values[3];
    dev.tx_bytes = values[8];
    dev.tx_packets = values[9];
    dev.tx_errs = values[10];
    dev.tx_drop = values[11];
    result.push_back(std::move(dev));
  }
  return result;
}

absl::StatusOr<Pressure> ParsePressure(std::string_view input, std::string_view file_name) {
  const absl::string_view text = Absl(input);
  const absl::string_view file = Absl(file_name);
  ASSIGN_OR_RETURN(std::vector<absl::string_view> lines, Lines(file, text));
  std::optional<PressureLine> some;
  std::optional<PressureLine> full;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<absl::string_view> fields = Fields(lines[i]);
    if (fields.empty() || (fields[0] != "some" && fields[0] != "full")) continue;
    PressureLine line;
    bool found[4] = {false, false, false, false};
    for (size_t f = 1; f < fields.size(); ++f) {
      std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(fields[f], absl::MaxSplits('=', 1));
      if (fields[f].find('=') == absl::string_view::npos) {
        return LineError(file, i, absl::StrCat("expected key=value, got \"", fields[f], "\""));
      }
      if (kv.first == "total") {
        RETURN_IF_ERROR(ParseCounter(file, i, kv.first, kv.second, &line.total_usec));
        found[3] = true;
        continue;
      }
      const std::pair<absl::string_view, double*> avgs[] = {
          {"avg10", &line.avg10}, {"avg60", &line.avg60}, {"avg300", &line.avg300}};
      for (size_t k = 0; k < 3; ++k) {
        if (kv.first != avgs[k].first) continue;
        double* out = avgs[k].second;
        if (!absl::SimpleAtod(kv.second, out) || !std::isfinite(*out) || *out < 0) {
          return LineError(file, i,
                           absl::StrCat(kv.first, ": \"", kv.second, "\" is not a percentage"));
        }
        found[k] = true;
      }
    }
    constexpr absl::string_view kKeys[] = {"avg10", "avg60", "avg300", "total"};
    for (size_t k = 0; k < 4; ++k) {
      if (!found[k]) return LineError(file, i, absl::StrCat("missing ", kKeys[k]));
    }
    (fields[0] == "some" ? some : full) = line;
  }
  if (!some) return FileError(file, "no \"some\" line");
  return Pressure{*some, full};
}

absl::StatusOr<CgroupCpuStat> ParseCgroupCpuStat(std::string_view input,
                                                 std::string_view file_name) {
  const absl::string_view text = Absl(input);
  const absl::string_view file = Absl(file_name);
  ASSIGN_OR_RETURN(std::vector<absl::string_view> lines, Lines(file, text));
  if (HasKey(lines, "usage_usec")) return ParseCgroupV2CpuStat(file, lines);
  if (HasKey(lines, "throttled_time")) return ParseCgroupV1CpuStat(file, lines);
  return FileError(file, "missing usage_usec (cgroup v2) or throttled_time (cgroup v1)");
}

absl::StatusOr<uint64_t> ParseCgroupCpuacctUsage(std::string_view text,
                                                 std::string_view file_name) {
  return ParseSingleInteger<uint64_t>(Absl(file_name), Absl(text));
}

absl::StatusOr<int64_t> ParseCgroupMemoryCurrent(std::string_view text,
                                                 std::string_view file_name) {
  return ParseSingleInteger<int64_t>(Absl(file_name), Absl(text));
}

// ---- Rates and levels -------------------------------------------------------

v1::CpuSample CpuRates(const CpuTimes& before, const CpuTimes& after) {
  v1::CpuSample sample;
  sample.set_cpus(after.cpus);
  const double idle = Delta(before.idle, after.idle);
  const double iowait = Delta(before.iowait, after.iowait);
  const double steal = Delta(before.steal, after.steal);
  const double total = Delta(before.user, after.user) + Delta(before.nice, after.nice) +
                       Delta(before.system, after.system) + idle + iowait +
                       Delta(before.irq, after.irq) + Delta(before.softirq, after.softirq) + steal;
  if (total <= 0) return sample;
  sample.set_utilization(1 - (idle + iowait) / total);
  sample.set_iowait(iowait / total);
  sample.set_steal(steal / total);
  return sample;
}

v1::MemorySample MemoryLevels(const MemInfo& info) {
  v1::MemorySample sample;
  sample.set_total_bytes(info.total_bytes);
  sample.set_available_bytes(info.available_bytes);
  sample.set_swap_used_bytes(info.swap_total_bytes > info.swap_free_bytes
                                 ? info.swap_total_bytes - info.swap_free_bytes
                                 : 0);
  return sample;
}

std::vector<v1::NetInterfaceSample> NetRates(const std::vector<NetDevCounters>& before,
                                             const std::vector<NetDevCounters>& after,
                                             double seconds) {
  std::vector<v1::NetInterfaceSample> result;
  if (!(seconds > 0)) return result;
  for (const NetDevCounters& now : after) {
    const NetDevCounters* then = nullptr;
    for (const NetDevCounters& candidate : before) {
      if (candidate.name == now.name) then = &candidate;
    }
    if (then == nullptr) continue;
    if (now.rx_bytes < then->rx_bytes || now.rx_packets < then->rx_packets ||
        now.rx_errs < then->rx_errs || now.rx_drop < then->rx_drop ||
        now.tx_bytes < then->tx_bytes || now.tx_packets < then->tx_packets ||
        now.tx_errs < then->tx_errs || now.tx_drop < then->tx_drop) {
      continue;
    }
    v1::NetInterfaceSample& sample = result.emplace_back();
    sample.set_name(now.name);
    sample.set_rx_bytes_per_second((now.rx_bytes - then->rx_bytes) / seconds);
    sample.set_tx_bytes_per_second((now.tx_bytes - then->tx_bytes) / seconds);
    sample.set_rx_drops_per_second((now.rx_drop - then->rx_drop) / seconds);
    sample.set_tx_drops_per_second((now.tx_drop - then->tx_drop) / seconds);
    sample.set_errors_per_second(
        static_cast<double>((now.rx_errs - then->rx_errs) + (now.tx_errs - then->tx_errs)) /
        seconds);
  }
  return result;
}

v1::PressureSample PressureLevels(const Pressure& cpu, const Pressure& memory, const Pressure& io) {
  v1::PressureSample sample;
  sample.set_cpu_some_avg10(cpu.some.avg10);
  sample.set_memory_some_avg10(memory.some.avg10);
  sample.set_memory_full_avg10(memory.full ? memory.full->avg10 : 0);
  sample.set_io_some_avg10(io.some.avg10);
  sample.set_io_full_avg10(io.full ? io.full->avg10 : 0);
  return sample;
}

v1::CgroupSample CgroupRates(const std::string& path, const CgroupCpuStat& before,
                             const CgroupCpuStat& after, int64_t memory_current_bytes,
                             const Pressure& cpu_pressure, double seconds) {
  v1::CgroupSample sample;
  sample.set_path(path);
  sample.set_memory_current_bytes(memory_current_bytes);
  sample.set_cpu_pressure_some_avg10(cpu_pressure.some.avg10);
  const bool reset = after.usage_usec < before.usage_usec || after.nr_periods < before.nr_periods ||
                     after.nr_throttled < before.nr_throttled ||
                     after.throttled_usec < before.throttled_usec;
  if (!(seconds > 0) || reset) return sample;
  sample.set_cpu_usage_cores((after.usage_usec - before.usage_usec) / 1e6 / seconds);
  const uint64_t periods = after.nr_periods - before.nr_periods;
  if (periods > 0) {
    sample.set_throttled_fraction(static_cast<double>(after.nr_throttled - before.nr_throttled) /
                                  periods);
  }
  sample.set_throttled_seconds_per_second((after.throttled_usec - before.throttled_usec) / 1e6 /
                                          seconds);
  return sample;
}

// ---- Files ------------------------------------------------------------------

RealFileSource::RealFileSource(std::string proc_root, std::string cgroup_root)
    : proc_root_(std::move(proc_root)), cgroup_root_(std::move(cgroup_root)) {}

absl::StatusOr<std::string> RealFileSource::RealPath(const std::string& path) const {
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") return absl::InvalidArgumentError(absl::StrCat(path, ": \"..\" in path"));
  }
  std::string real;
  if (!Rebase(path, kProcRoot, proc_root_, &real) &&
      !Rebase(path, kCgroupRoot, cgroup_root_, &real)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not under ", kProcRoot, " or ", kCgroupRoot));
  }
  return real;
}

absl::StatusOr<std::vector<std::string>> RealFileSource::ListDirectories(const std::string& path) {
  absl::StatusOr<std::string> real = RealPath(path);
  if (!real.ok()) return real.status();
  std::error_code ec;
  std::vector<std::string> names;
  for (std::filesystem::directory_iterator it(*real, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec)) names.push_back(it->path().filename().string());
  }
  if (ec) return absl::ErrnoToStatus(ec.value(), absl::StrCat(path, " (", *real, ")"));
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> RealFileSource::Read(const std::string& path) {
  absl::StatusOr<std::string> resolved = RealPath(path);
  if (!resolved.ok()) return resolved.status();
  const std::string& real = *resolved;
  const std::string name = real == path ? path : absl::StrCat(path, " (", real, ")");
  const int fd = open(real.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, name);
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      text.append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int error = errno;
      close(fd);
      return absl::ErrnoToStatus(error, name);
    }
  }
  close(fd);
  return text;
}

absl::StatusOr<std::string> FakeFileSource::Read(const std::string& path) {
  auto it = files_.find(path);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  return it->second;
}

absl::StatusOr<std::vector<std::string>> FakeFileSource::ListDirectories(const std::string& path) {
  const std::string prefix = path.back() == '/' ? path : path + "/";
  std::set<std::string> names;
  bool exists = false;
  for (const auto& [file, text] : files_) {
    if (!absl::StartsWith(file, prefix)) continue;
    exists = true;
    const std::string rest = file.substr(prefix.size());
    const size_t slash = rest.find('/');
    if (slash != std::string::npos) names.insert(rest.substr(0, slash));
  }
  if (!exists) return absl::NotFoundError(absl::StrCat(path, ": no such directory"));
  return std::vector<std::string>(names.begin(), names.end());
}

// ---- Finding the training pods' cgroups ----------------------------------------

absl::StatusOr<std::string> FindPodCgroup(FileSource& files, const std::string& pod_uid) {
  if (pod_uid.empty()) return absl::InvalidArgumentError("pod_uid: empty");
  const std::string cgroupfs = "pod" + pod_uid;
  const std::string systemd = "pod" + absl::StrReplaceAll(pod_uid, {{"-", "_"}}) + ".slice";
  auto names_pod = [&](const std::string& name) {
    return name == cgroupfs || absl::EndsWith(name, systemd);
  };
  // Breadth first from the kubepods directories at the root.
  std::vector<std::string> level;
  absl::StatusOr<std::vector<std::string>> top = files.ListDirectories(kCgroupRoot);
  if (!top.ok()) return top.status();
  for (const std::string& name : *top) {
    if (absl::StartsWith(name, "kubepods")) level.push_back(name);
  }
  for (int depth = 0; depth < 4 && !level.empty(); ++depth) {
    std::vector<std::string> next;
    for (const std::string& dir : level) {
      if (names_pod(dir.substr(dir.rfind('/') + 1))) return dir;
      absl::StatusOr<std::vector<std::string>> children =
          files.ListDirectories(absl::StrCat(kCgroupRoot, "/", dir));
      if (!children.ok()) continue;  // gone meanwhile
      for (const std::string& child : *children) next.push_back(absl::StrCat(dir, "/", child));
    }
    level = std::move(next);
  }
  for (const std::string& dir : level) {
    if (names_pod(dir.substr(dir.rfind('/') + 1))) return dir;
  }
  return absl::NotFoundError(
      absl::StrCat("pod ", pod_uid, ": no cgroup under ", kCgroupRoot, "/kubepods*"));
}

absl::StatusOr<std::string> ProcessCgroup(FileSource& files, int64_t pid) {
  const std::string path = absl::StrCat(kProcRoot, "/", pid, "/cgroup");
  absl::StatusOr<std::string> text = files.Read(path);
  if (!text.ok()) return text.status();
  std::optional<std::string> v1;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    // hierarchy-ID:controller-list:cgroup-path
    const std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    const std::string cgroup(absl::StripPrefix(parts[2], "/"));
    if (parts[0] == "0" && parts[1].empty()) return cgroup;
    for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
      if (controller == "cpu" && !v1) v1 = cgroup;
    }
  }
  if (v1) return *v1;
  return absl::NotFoundError(absl::StrCat(path, ": no cgroup v2 or cpu entry"));
}

std::optional<bool> ProcessRunning(FileSource& files, int64_t pid) {
  absl::StatusOr<std::string> stat = files.Read(absl::StrCat(kProcRoot, "/", pid, "/stat"));
  if (!stat.ok()) {
    if (absl::IsNotFound(stat.status())) return false;
    return std::nullopt;
  }
  // "pid (comm) state ...": comm may hold spaces and parentheses.
  const size_t close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) return std::nullopt;
  const char state = (*stat)[close + 2];
  return state != 'Z' && state != 'X';
}

std::vector<std::string> CgroupFinder::Find(
    const std::vector<std::pair<std::string, int64_t>>& processes) {
  std::set<std::string> paths;
  std::map<std::string, std::string> still;  // the pods reporting now
  for (const auto& [pod_uid, pid] : processes) {
    if (!pod_uid.empty()) {
      auto known = by_pod_.find(pod_uid);
      if (known != by_pod_.end()) {
        still.insert(*known);
        paths.insert(known->second);
        continue;
      }
      absl::StatusOr<std::string> found = FindPodCgroup(files_, pod_uid);
      if (found.ok()) {
        still[pod_uid] = *found;
        paths.insert(*found);
        continue;
      }
    }
    if (pid <= 0) continue;
    absl::StatusOr<std::string> own = ProcessCgroup(files_, pid);
    if (own.ok()) paths.insert(*own);
  }
  by_pod_ = std::move(still);
  return {paths.begin(), paths.end()};
}

// ---- Sampler ----------------------------------------------------------------

v1::NodeSample Sampler::Sample(double now_seconds, const std::vector<std::string>& cgroup_paths) {
  v1::NodeSample sample;
  sample.set_time_unix_ms(std::llround(now_seconds * 1000));

  absl::StatusOr<CpuTimes> cpu = ReadParsed(files_, kProcStat, ParseProcStat);
  if (!cpu.ok()) {
    AddError(sample, "cpu", cpu.status());
  } else {
    if (cpu_) *sample.mutable_cpu() = CpuRates(*cpu_, *cpu);
    cpu_ = *cpu;
  }

  absl::StatusOr<MemInfo> memory = ReadParsed(files_, kMeminfo, ParseMeminfo);
  if (!memory.ok()) {
    AddError(sample, "memory", memory.status());
  } else {
    *sample.mutable_memory() = MemoryLevels(*memory);
  }

  absl::StatusOr<std::vector<NetDevCounters>> net = ReadParsed(files_, kNetDev, ParseNetDev);
  if (!net.ok()) {
    AddError(sample, "net", net.status());
  } else {
    if (net_) {
      for (v1::NetInterfaceSample& rates :
           NetRates(net_->value, *net, now_seconds - net_->at_seconds)) {
        *sample.add_net() = std::move(rates);
      }
    }
    net_ = Timed<std::vector<NetDevCounters>>{*std::move(net), now_seconds};
  }

  auto pressure = [&](const std::string& path) {
    return ReadParsed(files_, path,
                      [&](std::string_view text) { return ParsePressure(text, path); });
  };
  absl::StatusOr<Pressure> psi[] = {pressure(absl::StrCat(kProcRoot, "/pressure/cpu")),
                                    pressure(absl::StrCat(kProcRoot, "/pressure/memory")),
                                    pressure(absl::StrCat(kProcRoot, "/pressure/io"))};
  if (!psi[0].ok() || !psi[1].ok() || !psi[2].ok()) {
    for (const absl::StatusOr<Pressure>& p : psi) {
      if (!p.ok()) AddError(sample, "pressure", p.status());
    }
  } else {
    *sample.mutable_pressure() = PressureLevels(*psi[0], *psi[1], *psi[2]);
  }

  std::map<std::string, Timed<CgroupCpuStat>> cgroups;
  for (const std::string& raw : cgroup_paths) {
    const std::string path(absl::StripSuffix(absl::StripPrefix(raw, "/"), "/"));
    const std::string dir = path.empty() ? kCgroupRoot : absl::StrCat(kCgroupRoot, "/", path);
    auto previous = cgroups_.find(path);

    absl::StatusOr<CgroupCpuStat> cpu_stat = ReadCgroupCpu(files_, dir);
    if (!cpu_stat.ok()) {
      AddError(sample, "cgroup", cpu_stat.status());
      if (previous != cgroups_.end()) cgroups.insert(*previous);
      continue;
    }
    const int64_t memory_current =
        ReadOptional<int64_t>(files_, dir + "/memory.current", ParseCgroupMemoryCurrent, 0, sample);
    const Pressure cpu_pressure =
        ReadOptional<Pressure>(files_, dir + "/cpu.pressure", ParsePressure, Pressure{}, sample);
    const bool seen = previous != cgroups_.end();
    *sample.add_cgroups() =
        CgroupRates(path, seen ? previous->second.value : *cpu_stat, *cpu_stat, memory_current,
                    cpu_pressure, seen ? now_seconds - previous->second.at_seconds : 0);
    cgroups[path] = Timed<CgroupCpuStat>{*cpu_stat, now_seconds};
  }
  cgroups_ = std::move(cgroups);
  return sample;
}

absl::StatusOr<uint64_t> ParseProcPidStatCpuTicks(std::string_view text) {
  const size_t paren = text.rfind(')');
  if (paren == std::string_view::npos) {
    return absl::InvalidArgumentError("/proc/PID/stat: no command name");
  }
  // After the name: state (field 3) ... utime (14), stime (15).
  const std::string_view rest = text.substr(paren + 1);
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(rest.data(), rest.size()), ' ', absl::SkipEmpty());
  uint64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::InvalidArgumentError("/proc/PID/stat: expected utime and stime (fields 14, 15)");
  }
  return utime + stime;
}

std::optional<double> NeighbourCpu::Sample(const std::string& pids_file,
                                           const std::set<int64_t>& job, double now_seconds) {
  std::ifstream in(pids_file);
  if (!in) return std::nullopt;
  std::map<int64_t, uint64_t> ticks;
  uint64_t used = 0;
  for (int64_t pid = 0; in >> pid;) {
    if (pid <= 0 || job.count(pid) > 0) continue;
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    absl::StatusOr<uint64_t> t = ParseProcPidStatCpuTicks(text);
    if (!t.ok()) continue;  // exited
    ticks[pid] = *t;
    if (auto it = ticks_.find(pid); it != ticks_.end() && *t >= it->second) used += *t - it->second;
  }
  const double elapsed = now_seconds - at_seconds_;
  const bool first = at_seconds_ < 0;
  ticks_ = std::move(ticks);
  at_seconds_ = now_seconds;
  if (first || !(elapsed > 0)) return std::nullopt;
  static const double kHz = static_cast<double>(sysconf(_SC_CLK_TCK));
  return static_cast<double>(used) / kHz / elapsed;
}

}  // namespace antdt::agent
