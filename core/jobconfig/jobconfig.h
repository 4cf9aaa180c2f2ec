// The manifest's straggler policy and monitor settings as the Controller and
// the Monitor take them. One translation, shared by the local runner and the
// Kubernetes operator, so a job behaves the same under both.
#pragma once

#include <cstdint>
#include <string>

#include "antdt/v1/sharding.pb.h"
#include "api/manifest/manifest.h"
#include "api/vocab/vocab.h"
#include "core/monitor/monitor.h"
#include "core/policy/policy.h"

namespace antdt::jobconfig {

// spec.stragglerPolicy as a policy::PolicySpec under `policy` (the job's
// own or an override), deciding every `interval_ms`.
policy::PolicySpec PolicySpecFor(const manifest::Job& job, vocab::Policy policy,
                                 int64_t interval_ms);

// spec.monitor as a monitor::MonitorConfig. The allowed lateness covers the
// workers' batched step reports (every 250 ms in the examples).
monitor::MonitorConfig MonitorConfigFor(const manifest::MonitorSpec& spec);

// The job's dataset as the sharding service takes it (dataset name "train").
v1::DatasetSpec DatasetSpecFor(const manifest::Job& job);

// How often the Controller decides at least: half a window, at least 500 ms;
// with windows in steps, a window and at least 2 s (each window's close and
// each onset takes a turn besides).
int64_t ControlIntervalMs(const manifest::MonitorSpec& spec);

// The initial local batch of worker i: the global batch split evenly over
// spec.workers.replicas, remainders to the lowest ids.
int64_t InitialLocalBatch(const manifest::Job& job, int32_t i);

// True when spec.workers' pod template gives containers[0] a command: the
// backends run that (with the worker environment, jobconfig/worker_env.h)
// rather than the built-in demo trainer.
bool HasWorkerCommand(const manifest::Job& job);

// The name of the built-in demo trainer's binary (workload/trainer).
inline constexpr char kDemoTrainer[] = "antdt-trainer-worker";

// True when the workers run the built-in demo trainer: no command, or a
// command whose first word is kDemoTrainer (by any path).
bool RunsDemoTrainer(const manifest::Job& job);

// How many parameter servers the job runs, and the feature slice of server k
// (features split evenly, remainders first). A job whose workers run a
// command of their own runs spec.parameterServers.replicas, 0 included (a
// collective job, e.g. PyTorch DDP); the demo trainer needs one, so at least
// one for it.
int32_t ParameterServerCount(const manifest::Job& job);
int32_t ParameterServerFeatures(const manifest::Job& job, int32_t k);

// LoopOptions::regroup_seconds for the job: loop::kDefaultRegroupSeconds
// when it runs no parameter server (its ranks form one collective group), 0
// otherwise.
double RegroupSeconds(const manifest::Job& job);

// The step deadline the job's workers keep under `policy` in `mode`, as a
// multiple of the step's median worker time
// (spec.stragglerPolicy.stepDeadline): 0 (no deadline) unless the policy is
// one of AntDT's own (antdt-nd, antdt-dd, custom), so that `none` and the
// baselines stay what they are, and the mode is Act (Recommend carries out
// nothing, the deadline's cuts included).
double StepDeadline(const manifest::Job& job, vocab::Policy policy, vocab::Mode mode);
// The least the deadline is fitted down to (common/step_deadline.h) when the
// manifest left stepDeadline unset and the job has a deadline; 0: the
// deadline is StepDeadline always (antdt-ps --step-deadline-floor).
double StepDeadlineFloor(const manifest::Job& job, vocab::Policy policy, vocab::Mode mode);
// The demo trainer's --micro-batches under a step deadline: the deadline is
// told between two, so a step stops at most an eighth of its batch past it.
inline constexpr int kDeadlineMicroBatches = 8;

}  // namespace antdt::jobconfig
