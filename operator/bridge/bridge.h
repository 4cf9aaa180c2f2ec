// The manifest's straggler policy and monitor settings as the Controller and
// the Monitor take them. One translation, shared by the local runner and the
// Kubernetes operator, so a job behaves the same under both.
#pragma once

#include <cstdint>
#include <string>

#include "antdt/v1/sharding.pb.h"
#include "operator/controller/policy.h"
#include "operator/manifest/manifest.h"
#include "operator/monitor/monitor.h"
#include "operator/vocab/vocab.h"

namespace antdt::bridge {

// spec.stragglerPolicy as a controller::PolicySpec under `policy` (the job's
// own or an override), deciding every `interval_ms`.
controller::PolicySpec PolicySpecFor(const manifest::Job& job, vocab::Policy policy,
                                     int64_t interval_ms);

// spec.monitor as a monitor::MonitorConfig. The allowed lateness covers the
// workers' batched step reports (every 250 ms in the examples).
monitor::MonitorConfig MonitorConfigFor(const manifest::MonitorSpec& spec);

// The job's dataset as the sharding service takes it (dataset name "train").
v1::DatasetSpec DatasetSpecFor(const manifest::Job& job);

// How often the Controller decides: half a window, at least 500 ms.
int64_t ControlIntervalMs(const manifest::MonitorSpec& spec);

// The initial local batch of worker i: the global batch split evenly over
// spec.workers.replicas, remainders to the lowest ids.
int64_t InitialLocalBatch(const manifest::Job& job, int32_t i);

// How many parameter servers the job runs (replicas 0 means one) and the
// feature slice of server k (features split evenly, remainders first).
int32_t ParameterServerCount(const manifest::Job& job);
int32_t ParameterServerFeatures(const manifest::Job& job, int32_t k);

}  // namespace antdt::bridge
