#include "workload/trainer/ps_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config.h"
#include "common/status.h"

namespace antdt::trainer {
namespace fs = std::filesystem;
namespace {

std::string FileName(int64_t step) { return absl::StrFormat("step-%012d.ckpt", step); }

}  // namespace

v1::ParameterServerState ToProto(const PsState& state, const std::string& ps_id) {
  v1::ParameterServerState p;
  p.set_step(state.step);
  p.mutable_parameters()->Add(state.parameters.begin(), state.parameters.end());
  p.set_samples(state.samples);
  p.set_mean_loss(state.mean_loss);
  p.set_first_mean_loss(state.first_mean_loss);
  p.set_ps_id(ps_id);
  return p;
}

PsState FromProto(const v1::ParameterServerState& p) {
  PsState s;
  s.step = p.step();
  s.parameters.assign(p.parameters().begin(), p.parameters().end());
  s.samples = p.samples();
  s.mean_loss = p.mean_loss();
  s.first_mean_loss = p.first_mean_loss();
  return s;
}

absl::Status WriteCheckpoint(const std::string& dir, const std::string& ps_id, const PsState& state,
                             int keep) {
  const fs::path sub = fs::path(dir) / ps_id;
  std::error_code ec;
  fs::create_directories(sub, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create ", sub.string(), ": ", ec.message()));
  RETURN_IF_ERROR(WriteFileAtomically((sub / FileName(state.step)).string(),
                                      ToProto(state, ps_id).SerializeAsString()));
  std::vector<int64_t> steps = CheckpointSteps(dir, ps_id);
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 1)) < steps.size(); ++i) {
    fs::remove(sub / FileName(steps[i]), ec);
  }
  return absl::OkStatus();
}

absl::StatusOr<PsState> ReadCheckpoint(const std::string& dir, const std::string& ps_id,
                                       int64_t step) {
  const std::string path = (fs::path(dir) / ps_id / FileName(step)).string();
  absl::StatusOr<std::string> blob = ReadFile(path);
  if (!blob.ok()) {
    return absl::NotFoundError(absl::StrCat("step: no checkpoint of ", ps_id, " at step ", step));
  }
  v1::ParameterServerState p;
  if (!p.ParseFromString(*blob) || p.step() != step || p.ps_id() != ps_id) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a checkpoint of ", ps_id, " at step ", step));
  }
  return FromProto(p);
}

std::vector<int64_t> CheckpointSteps(const std::string& dir, const std::string& ps_id) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(dir) / ps_id, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (name.size() == 22 && name.rfind("step-", 0) == 0 && name.substr(17) == ".ckpt" &&
        absl::SimpleAtoi(name.substr(5, 12), &step)) {
      steps.push_back(step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<int64_t> LatestCommonCheckpoint(const std::string& dir,
                                              const std::vector<std::string>& ps_ids) {
  std::map<int64_t, size_t> holders;
  for (const std::string& id : ps_ids) {
    for (int64_t step : CheckpointSteps(dir, id)) ++holders[step];
  }
  for (auto it = holders.rbegin(); it != holders.rend(); ++it) {
    if (it->second == ps_ids.size()) return it->first;
  }
  return std::nullopt;
}

}  // namespace antdt::trainer
