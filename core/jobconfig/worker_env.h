// A worker's environment, the same under every backend: the names of the
// variables AntDT gives a worker (kept here and nowhere else), their values
// for one incarnation, Kubernetes' $(VAR) expansion, and containers[0]'s env
// and command over them. Pure: no I/O, no process environment read.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "api/manifest/manifest.h"

namespace antdt::jobconfig {

// ---- The variables every worker gets (docs/kubernetes.md, docs/local-runner.md).
inline constexpr char kEnvJob[] = "ANTDT_JOB";                     // metadata.name
inline constexpr char kEnvNamespace[] = "ANTDT_NAMESPACE";         // metadata.namespace
inline constexpr char kEnvDataset[] = "ANTDT_DATASET";             // "train"
inline constexpr char kEnvWorkers[] = "ANTDT_WORKERS";             // spec.workers.replicas
inline constexpr char kEnvShardingAddr[] = "ANTDT_SHARDING_ADDR";  // host:port
inline constexpr char kEnvPsAddrs[] = "ANTDT_PS_ADDRS";            // a,b,...; empty: none
inline constexpr char kEnvAgentAddr[] = "ANTDT_AGENT_ADDR";        // the node's agent
inline constexpr char kEnvGlobalBatch[] = "ANTDT_GLOBAL_BATCH";    // spec.model.globalBatchSize
inline constexpr char kEnvFeatures[] = "ANTDT_FEATURES";           // spec.model.features
inline constexpr char kEnvLearningRate[] = "ANTDT_LEARNING_RATE";  // spec.model.learningRate
inline constexpr char kEnvCheckpointPath[] = "ANTDT_CHECKPOINT_PATH";
inline constexpr char kEnvWorkerId[] = "ANTDT_WORKER_ID";             // worker-<i>
inline constexpr char kEnvIncarnation[] = "ANTDT_INCARNATION";        // 0, then +1 per restart
inline constexpr char kEnvLocalBatch[] = "ANTDT_LOCAL_BATCH";         // current (after ADJUST_BS)
inline constexpr char kEnvRecords[] = "ANTDT_RECORDS";                // spec.dataset.records
inline constexpr char kEnvEpochs[] = "ANTDT_EPOCHS";                  // spec.dataset.epochs
inline constexpr char kEnvShardSize[] = "ANTDT_SHARD_SIZE";           // spec.dataset.shardSize
inline constexpr char kEnvShuffle[] = "ANTDT_SHUFFLE";                // true or false
inline constexpr char kEnvSeed[] = "ANTDT_SEED";                      // spec.dataset.seed
inline constexpr char kEnvJournal[] = "ANTDT_JOURNAL";                // acknowledged commits
inline constexpr char kEnvLossLog[] = "ANTDT_LOSS_LOG";               // JSON lines, one per step
inline constexpr char kEnvMode[] = "ANTDT_MODE";                      // kModeAntdt or kModePlain
inline constexpr char kEnvNodeSpeedFile[] = "ANTDT_NODE_SPEED_FILE";  // emulated speed
// PyTorch's rendezvous, as Kubeflow's PyTorchJob sets it.
inline constexpr char kEnvMasterAddr[] = "MASTER_ADDR";
inline constexpr char kEnvMasterPort[] = "MASTER_PORT";
inline constexpr char kEnvRank[] = "RANK";             // i for worker-i, stable across restarts
inline constexpr char kEnvWorldSize[] = "WORLD_SIZE";  // spec.workers.replicas
inline constexpr char kEnvLocalRank[] = "LOCAL_RANK";  // 0: one worker per node

// ANTDT_MODE: the trainer reads its data through the sharding service and
// journals its commits; or, the benchmark's baseline, through torch's
// DistributedSampler with no journal.
inline constexpr char kModeAntdt[] = "antdt";
inline constexpr char kModePlain[] = "plain";

// Name and value, in order.
using EnvList = std::vector<std::pair<std::string, std::string>>;

// Where one incarnation of a worker runs: what its backend knows and the
// manifest does not. A backend that leaves a path empty sets it empty.
struct WorkerPlacement {
  std::string sharding_addr;
  std::vector<std::string> ps_addrs;
  std::string agent_addr;
  std::string checkpoint_path;
  int32_t rank = 0;  // worker-<rank>
  int32_t incarnation = 0;
  int64_t local_batch = 0;
  std::string journal;
  std::string loss_log;
  std::string mode = kModeAntdt;
  std::string node_speed_file;
  std::string master_addr;
  int master_port = 0;
};

// Every variable above for `job` and `placement`, in the order listed.
EnvList WorkerEnv(const manifest::Job& job, const WorkerPlacement& placement);

// $(VAR) expansion as Kubernetes does it (its
// third_party/forked/golang/expansion): $(NAME) becomes the value of NAME in
// `vars`; `$$` is a literal `$`; an unknown name, an unclosed "$(" and a `$`
// before anything else stay as written.
std::string ExpandVars(std::string_view text, const std::map<std::string, std::string>& vars);

// `base`, then containers[0]'s env in order: each value expanded over `base`
// and the entries before it; an entry replaces a variable of its name in
// place, a new name goes at the end. `path` names the container in errors: a
// valueFrom (which only Kubernetes resolves) is an error naming
// `path`.env[i].valueFrom.
absl::StatusOr<EnvList> ContainerEnv(const EnvList& base, const manifest::ContainerSpec& container,
                                     const std::string& path);

// command + args, each expanded over `env`.
std::vector<std::string> ContainerArgv(const manifest::ContainerSpec& container,
                                       const EnvList& env);

}  // namespace antdt::jobconfig
