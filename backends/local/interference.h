// Real interference for the local runner's scenario slowdowns other than the
// emulated speed file and the cgroup CPU quota (cgroup.h):
//  - cpu-contention: factor - 1 processes that spin (`setsid sh -c 'while :;
//    do :; done'`, each in its own session, so the scheduler weighs each as
//    another job) on one CPU, with every thread of the node's workers pinned to
//    that CPU (sched_setaffinity) while the slowdown is active: neighbours on
//    a non-dedicated node. Needs no privilege.
//  - slow-data: the node's workers reach the sharding service through a TCP
//    relay on 127.0.0.1 that holds each chunk for a delay in each direction
//    while the slowdown is active: a data source far away.
//  - gpu-throttle: the node's agent loads the test NVML library
//    (libantdt-test-nvml.so) with $ANTDT_TEST_NVML_STATE naming a file the
//    runner writes "throttle" to while the slowdown is active; the emulated
//    speed file carries the slowdown itself (Scenario::SpeedAt).
// Thread-safety: the runner's thread owns it; the relays run their own threads.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/manifest/manifest.h"

namespace antdt::local {

class DelayRelay;

struct InterferenceOptions {
  std::string work_dir;          // the gpu-throttle state files go to nodes/
  std::string sharding_address;  // what slow-data relays forward to
  int64_t step_device_us = 0;    // a step's device time at speed 1 (a relay's unit)
};

class Interference {
 public:
  static absl::StatusOr<std::unique_ptr<Interference>> Create(const manifest::Scenario& scenario,
                                                              InterferenceOptions options);
  ~Interference();  // stops the spinners and the relays
  Interference(const Interference&) = delete;
  Interference& operator=(const Interference&) = delete;

  // The sharding address for a worker on `node`: its relay's, or "" (the
  // service's own).
  std::string ShardingAddressFor(const std::string& node) const;
  // The test NVML state file of `node`, "" when it has no gpu-throttle.
  std::string NvmlStateFile(const std::string& node) const;
  // A worker process started on `node`.
  void OnSpawn(const std::string& node, pid_t pid);
  // The file listing `node`'s processes (its workers and spinners), one pid a
  // line, which its agent reads (--node-pids-file): the emulated nodes share
  // one host, so each has its own process table here.
  std::string PidsFile(const std::string& node) const;
  // The scenario at `t_ms`: spinners started or stopped, workers pinned or
  // let go, relay delays, NVML state files.
  absl::Status Apply(const manifest::Scenario& scenario, int64_t t_ms);

 private:
  struct Node;
  explicit Interference(InterferenceOptions options);
  absl::Status ApplyContention(Node& node, double factor);
  void WritePids(const std::string& name, Node& node);

  InterferenceOptions o_;
  std::map<std::string, std::unique_ptr<Node>> nodes_;
  int cpu_ = 0;  // the CPU contended nodes are pinned to
};

// A TCP relay from 127.0.0.1:PORT to `upstream` that holds each chunk for
// the current delay, in both directions. Thread-safe.
class DelayRelay {
 public:
  static absl::StatusOr<std::unique_ptr<DelayRelay>> Start(const std::string& upstream);
  ~DelayRelay();
  const std::string& address() const { return address_; }
  void SetDelayUs(int64_t us);

 private:
  struct State;
  explicit DelayRelay(std::shared_ptr<State> state, std::string address);
  std::shared_ptr<State> state_;
  std::string address_;
};

}  // namespace antdt::local
