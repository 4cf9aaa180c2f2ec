#include "core/jobconfig/worker_env.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace antdt::jobconfig {
namespace {

std::map<std::string, std::string> AsMap(const EnvList& env) {
  std::map<std::string, std::string> vars;
  for (const auto& [name, value] : env) vars[name] = value;
  return vars;
}

}  // namespace

EnvList WorkerEnv(const manifest::Job& job, const WorkerPlacement& p) {
  return {
      {kEnvJob, job.name},
      {kEnvNamespace, job.namespace_},
      {kEnvDataset, "train"},
      {kEnvWorkers, absl::StrCat(job.workers.replicas)},
      {kEnvShardingAddr, p.sharding_addr},
      {kEnvPsAddrs, absl::StrJoin(p.ps_addrs, ",")},
      {kEnvAgentAddr, p.agent_addr},
      {kEnvGlobalBatch, absl::StrCat(job.model.global_batch_size)},
      {kEnvFeatures, absl::StrCat(job.model.features)},
      {kEnvLearningRate, absl::StrCat(job.model.learning_rate)},
      {kEnvCheckpointPath, p.checkpoint_path},
      {kEnvWorkerId, vocab::MemberName(vocab::Role::kWorker, p.rank)},
      {kEnvIncarnation, absl::StrCat(p.incarnation)},
      {kEnvLocalBatch, absl::StrCat(p.local_batch)},
      {kEnvRecords, absl::StrCat(job.dataset.records)},
      {kEnvEpochs, absl::StrCat(job.dataset.epochs)},
      {kEnvShardSize, absl::StrCat(job.dataset.shard_size)},
      {kEnvShuffle, job.dataset.shuffle ? "true" : "false"},
      {kEnvSeed, absl::StrCat(job.dataset.seed)},
      {kEnvJournal, p.journal},
      {kEnvLossLog, p.loss_log},
      {kEnvMode, p.mode},
      {kEnvNodeSpeedFile, p.node_speed_file},
      {kEnvMasterAddr, p.master_addr},
      {kEnvMasterPort, absl::StrCat(p.master_port)},
      {kEnvRank, absl::StrCat(p.rank)},
      {kEnvWorldSize, absl::StrCat(job.workers.replicas)},
      {kEnvLocalRank, "0"},
  };
}

std::string ExpandVars(std::string_view text, const std::map<std::string, std::string>& vars) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '$' || i + 1 == text.size()) {
      out += text[i++];
      continue;
    }
    const char next = text[i + 1];
    if (next == '$') {  // $$: a literal $
      out += '$';
      i += 2;
      continue;
    }
    const size_t close = next == '(' ? text.find(')', i + 2) : std::string_view::npos;
    if (close == std::string_view::npos) {  // "$x" or an unclosed "$(": as written
      out += text.substr(i, 2);
      i += 2;
      continue;
    }
    const std::string name(text.substr(i + 2, close - i - 2));
    auto it = vars.find(name);
    out += it != vars.end() ? it->second : absl::StrCat("$(", name, ")");
    i = close + 1;
  }
  return out;
}

absl::StatusOr<EnvList> ContainerEnv(const EnvList& base, const manifest::ContainerSpec& container,
                                     const std::string& path) {
  EnvList env = base;
  std::map<std::string, std::string> vars = AsMap(base);
  for (size_t i = 0; i < container.env.size(); ++i) {
    const manifest::EnvVar& var = container.env[i];
    if (var.value_from) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".env[", i,
                       "].valueFrom: not supported here (only Kubernetes "
                       "resolves it); give a value"));
    }
    std::string value = ExpandVars(var.value, vars);
    vars[var.name] = value;
    bool replaced = false;
    for (auto& [name, old] : env) {
      if (name == var.name) {
        old = value;
        replaced = true;
      }
    }
    if (!replaced) env.emplace_back(var.name, std::move(value));
  }
  return env;
}

std::vector<std::string> ContainerArgv(const manifest::ContainerSpec& container,
                                       const EnvList& env) {
  const std::map<std::string, std::string> vars = AsMap(env);
  std::vector<std::string> argv;
  for (const std::string& a : container.command) argv.push_back(ExpandVars(a, vars));
  for (const std::string& a : container.args) argv.push_back(ExpandVars(a, vars));
  return argv;
}

}  // namespace antdt::jobconfig
