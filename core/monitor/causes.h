// Cause attribution for the Monitor: a straggler's signals against its peers'.
//
// A signal names its cause only when the straggler's value passes the
// signal's threshold AND stands out from its peers' (the other members of its
// role that reported in the same window): above peer_ratio x their median, or
// for memory_available_fraction below their median / peer_ratio. A pressure
// every node shows (one busy host, a shared disk) explains nobody's slowness,
// so it names nothing; a signal no peer reports is judged by its threshold
// alone. The first signal that fires, in this order, wins (most specific
// first; generic saturation last, as a busy training node is normally near
// 100% CPU):
//   1 HARDWARE         deterministic by label (device_speed, hardware_minority)
//   2 CPU_THROTTLING   cgroup_throttled_fraction (max over the node's cgroups)
//   3 GPU_THROTTLING   gpu_thermal_throttling, gpu_power_throttling (0 or 1)
//   4 MEMORY_PRESSURE  memory_some_avg10, memory_available_fraction
//   5 IO_PRESSURE      io_some_avg10
//   6 NETWORK          net_drops_per_second, net_errors_per_second (not "lo"),
//                      communication_share of the step
//   7 CPU_CONTENTION   neighbour_cpu_cores (CPU the node's other processes
//                      used), cpu_wait_share (the training thread's run-queue
//                      wait over its step time), cpu_some_avg10, cpu_utilization
//   8 DATA_LOADING     data_wait_share of the step
//   9 CAUSE_UNKNOWN
// Pure functions; no state.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "antdt/v1/monitor.pb.h"

namespace antdt::monitor {

struct CauseThresholds;

// One member's signal values in one window, by evidence key.
using SignalValues = std::map<std::string, double>;

// The values a node sample gives (cgroups, GPUs, pressure, memory, network,
// CPU), each only when the sample has that part.
SignalValues NodeSignalValues(const v1::NodeSample& sample);
// The same values handed to `f` one by one (key, value), in no map.
void ForEachNodeSignal(const v1::NodeSample& sample,
                       absl::FunctionRef<void(std::string_view, double)> f);

struct Attribution {
  v1::Cause cause = v1::CAUSE_UNKNOWN;
  // Every value checked, whichever fired, and `KEY_peer_median` for each
  // signal some peer reported.
  std::map<std::string, double> evidence;
};

// The evidence keys of the signals that name `cause`, in the order tried
// (none for HARDWARE, which labels name, and for CAUSE_UNKNOWN).
std::vector<std::string> SignalKeys(v1::Cause cause);

// The values of each signal over the members of one role in one window,
// sorted once, so that each straggler's peer median (every member but
// itself) is a lookup, not a pass over the role: a window's attribution is
// linear in the members, not in stragglers x members. Non-finite values are
// left out.
class PeerSignals {
 public:
  PeerSignals() = default;
  explicit PeerSignals(const std::vector<const SignalValues*>& members);
  void Add(const SignalValues& member);
  // One value of one member.
  void Add(std::string_view key, double value);
  // The median of `key` over the members added, one value equal to
  // `excluded` left out (the asking member's own, when it was added: null
  // when it was not); none when no other member reported `key`.
  std::optional<double> MedianWithout(const std::string& key, const double* excluded) const;

 private:
  void Sort() const;
  mutable absl::flat_hash_map<std::string, std::vector<double>> values_;
  mutable bool sorted_ = true;
};

// The cause of a straggler with values `own` among `peers`; `self`: its
// values as added to `peers` (left out of every median), or null when it was
// not added; `hardware`: its node's labels mark it a slower device (HARDWARE
// wins).
Attribution AttributeCause(const SignalValues& own, const PeerSignals& peers,
                           const SignalValues* self, bool hardware,
                           const CauseThresholds& thresholds);
// The same with its peers' values listed (itself not among them).
Attribution AttributeCause(const SignalValues& own, const std::vector<const SignalValues*>& peers,
                           bool hardware, const CauseThresholds& thresholds);

}  // namespace antdt::monitor
