#include "core/monitor/causes.h"

#include <algorithm>
#include <cmath>

#include "api/vocab/vocab.h"
#include "core/monitor/monitor.h"

namespace antdt::monitor {
namespace {

double NonNegative(double v) { return std::isfinite(v) && v > 0 ? v : 0; }

struct Signal {
  const char* key;
  v1::Cause cause;
  double threshold;
  bool lower_is_worse = false;
};

// In the order they are tried (see causes.h).
std::vector<Signal> SignalsInOrder(const CauseThresholds& th) {
  return {
      {"cgroup_throttled_fraction", v1::CPU_THROTTLING, th.cgroup_throttled_fraction},
      {"gpu_thermal_throttling", v1::GPU_THROTTLING, 0.5},
      {"gpu_power_throttling", v1::GPU_THROTTLING, 0.5},
      {"memory_some_avg10", v1::MEMORY_PRESSURE, th.memory_some_avg10},
      {"memory_available_fraction", v1::MEMORY_PRESSURE, th.memory_available_fraction, true},
      {"io_some_avg10", v1::IO_PRESSURE, th.io_some_avg10},
      {"net_drops_per_second", v1::NETWORK, 0},
      {"net_errors_per_second", v1::NETWORK, 0},
      {"communication_share", v1::NETWORK, th.step_share},
      {"neighbour_cpu_cores", v1::CPU_CONTENTION, th.neighbour_cpu_cores},
      {"cpu_wait_share", v1::CPU_CONTENTION, th.cpu_wait_share},
      {"cpu_some_avg10", v1::CPU_CONTENTION, th.cpu_some_avg10},
      {"cpu_utilization", v1::CPU_CONTENTION, th.cpu_utilization},
      {"data_wait_share", v1::DATA_LOADING, th.step_share},
  };
}

// Whether `value` passes the signal's threshold and stands out from its
// peers' median (a signal no peer reports: the threshold alone).
bool Fires(const Signal& s, double value, std::optional<double> peer_median, double ratio) {
  if (s.lower_is_worse) {
    if (!(value < s.threshold)) return false;
    return !peer_median || value * ratio < *peer_median;
  }
  if (!(value > s.threshold)) return false;
  return !peer_median || value > ratio * *peer_median;
}

}  // namespace

std::vector<std::string> SignalKeys(v1::Cause cause) {
  std::vector<std::string> keys;
  for (const Signal& s : SignalsInOrder(CauseThresholds{})) {
    if (s.cause == cause) keys.emplace_back(s.key);
  }
  return keys;
}

void ForEachNodeSignal(const v1::NodeSample& sample,
                       absl::FunctionRef<void(std::string_view, double)> v) {
  if (sample.cgroups_size() > 0) {
    double max_throttled = 0;
    for (const auto& cg : sample.cgroups()) {
      max_throttled = std::max(max_throttled, NonNegative(cg.throttled_fraction()));
    }
    v("cgroup_throttled_fraction", max_throttled);
  }
  if (sample.gpus_size() > 0) {
    bool thermal = false, power = false;
    for (const auto& g : sample.gpus()) {
      thermal = thermal || g.thermal_throttling();
      power = power || g.power_throttling();
    }
    v("gpu_thermal_throttling", thermal ? 1 : 0);
    v("gpu_power_throttling", power ? 1 : 0);
  }
  if (sample.has_pressure()) {
    v("memory_some_avg10", NonNegative(sample.pressure().memory_some_avg10()));
    v("io_some_avg10", NonNegative(sample.pressure().io_some_avg10()));
    v("cpu_some_avg10", NonNegative(sample.pressure().cpu_some_avg10()));
  }
  if (sample.has_memory() && sample.memory().total_bytes() > 0) {
    v("memory_available_fraction", static_cast<double>(sample.memory().available_bytes()) /
                                       static_cast<double>(sample.memory().total_bytes()));
  }
  if (sample.net_size() > 0) {
    double drops = 0, errors = 0;
    for (const auto& n : sample.net()) {
      if (n.name() == "lo") continue;
      drops += NonNegative(n.rx_drops_per_second()) + NonNegative(n.tx_drops_per_second());
      errors += NonNegative(n.errors_per_second());
    }
    v("net_drops_per_second", drops);
    v("net_errors_per_second", errors);
  }
  if (sample.has_cpu()) v("cpu_utilization", NonNegative(sample.cpu().utilization()));
  if (sample.has_neighbour_cpu_cores()) {
    v("neighbour_cpu_cores", NonNegative(sample.neighbour_cpu_cores()));
  }
}

SignalValues NodeSignalValues(const v1::NodeSample& sample) {
  SignalValues values;
  ForEachNodeSignal(sample, [&](std::string_view key, double value) {
    values.insert_or_assign(std::string(key), value);
  });
  return values;
}

PeerSignals::PeerSignals(const std::vector<const SignalValues*>& members) {
  for (const SignalValues* m : members) Add(*m);
}

void PeerSignals::Add(const SignalValues& member) {
  for (const auto& [key, value] : member) Add(key, value);
}

void PeerSignals::Add(std::string_view key, double value) {
  if (!std::isfinite(value)) return;
  // abseil's own string_view (Debian's is not std's) for a lookup without a copy.
  auto it = values_.find(absl::string_view(key.data(), key.size()));
  if (it == values_.end()) it = values_.try_emplace(std::string(key)).first;
  it->second.push_back(value);
  sorted_ = false;
}

void PeerSignals::Sort() const {
  if (sorted_) return;
  for (auto& [key, v] : values_) std::sort(v.begin(), v.end());
  sorted_ = true;
}

std::optional<double> PeerSignals::MedianWithout(const std::string& key,
                                                 const double* excluded) const {
  Sort();
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  const std::vector<double>& v = it->second;
  // The index of the value left out (v.size(): none); the i-th of the rest
  // is v[i] below it and v[i + 1] from it on.
  size_t skip = v.size();
  if (excluded != nullptr && std::isfinite(*excluded)) {
    auto at = std::lower_bound(v.begin(), v.end(), *excluded);
    if (at != v.end() && *at == *excluded) skip = static_cast<size_t>(at - v.begin());
  }
  const size_t n = v.size() - (skip < v.size() ? 1 : 0);
  if (n == 0) return std::nullopt;
  auto nth = [&](size_t i) { return v[i < skip ? i : i + 1]; };
  const size_t mid = n / 2;
  return n % 2 == 1 ? nth(mid) : (nth(mid - 1) + nth(mid)) / 2;
}

Attribution AttributeCause(const SignalValues& own, const PeerSignals& peers,
                           const SignalValues* self, bool hardware,
                           const CauseThresholds& thresholds) {
  Attribution out;
  out.evidence.insert(own.begin(), own.end());
  if (hardware) out.cause = v1::HARDWARE;
  for (const Signal& s : SignalsInOrder(thresholds)) {
    auto it = own.find(s.key);
    if (it == own.end()) continue;
    const double* excluded = nullptr;
    if (self != nullptr) {
      if (auto sit = self->find(s.key); sit != self->end()) excluded = &sit->second;
    }
    const std::optional<double> median = peers.MedianWithout(s.key, excluded);
    if (median) out.evidence[std::string(s.key) + "_peer_median"] = *median;
    if (out.cause == v1::CAUSE_UNKNOWN && Fires(s, it->second, median, thresholds.peer_ratio)) {
      out.cause = s.cause;
    }
  }
  return out;
}

Attribution AttributeCause(const SignalValues& own, const std::vector<const SignalValues*>& peers,
                           bool hardware, const CauseThresholds& thresholds) {
  return AttributeCause(own, PeerSignals(peers), nullptr, hardware, thresholds);
}

}  // namespace antdt::monitor
