// Parameter-server checkpoints on disk: one file per server and step,
//   <dir>/<ps-id>/step-<step, 12 digits>.ckpt
// holding a v1::ParameterServerState, written atomically (a temporary file
// renamed), the oldest removed beyond `keep`. A checkpoint of the job at step
// s is complete when every server has its file for s (the first server writes
// its file only after the sharding service's Checkpoint of s succeeded).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "antdt/v1/trainer.pb.h"
#include "workload/trainer/ps.h"

namespace antdt::trainer {

v1::ParameterServerState ToProto(const PsState& state, const std::string& ps_id);
PsState FromProto(const v1::ParameterServerState& state);

// Writes `state` as <dir>/<ps_id>/step-N.ckpt and keeps the newest `keep`.
absl::Status WriteCheckpoint(const std::string& dir, const std::string& ps_id, const PsState& state,
                             int keep);
// The server's checkpoint of `step`; NotFound when there is none, DataLoss
// when it does not parse or is another server's.
absl::StatusOr<PsState> ReadCheckpoint(const std::string& dir, const std::string& ps_id,
                                       int64_t step);
// The steps the server has checkpoints of, oldest first.
std::vector<int64_t> CheckpointSteps(const std::string& dir, const std::string& ps_id);
// The newest step every one of `ps_ids` has a checkpoint of.
std::optional<int64_t> LatestCommonCheckpoint(const std::string& dir,
                                              const std::vector<std::string>& ps_ids);

}  // namespace antdt::trainer
