#include "core/jobconfig/worker_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ostream>

namespace antdt::jobconfig {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

struct ExpandCase {
  std::string text;
  std::string want;
};

void PrintTo(const ExpandCase& c, std::ostream* os) { *os << "\"" << c.text << "\""; }

class ExpandVarsTest : public ::testing::TestWithParam<ExpandCase> {};

TEST_P(ExpandVarsTest, AsKubernetesDoes) {
  const std::map<std::string, std::string> vars = {
      {"A", "a"}, {"PORT", "29500"}, {"EMPTY", ""}, {"DOLLAR", "$(A)"}};
  EXPECT_EQ(ExpandVars(GetParam().text, vars), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ExpandVarsTest,
    ::testing::Values(ExpandCase{"", ""}, ExpandCase{"plain", "plain"}, ExpandCase{"$(A)", "a"},
                      ExpandCase{"x$(A)y$(A)", "xaya"},
                      ExpandCase{"127.0.0.1:$(PORT)", "127.0.0.1:29500"},
                      ExpandCase{"[$(EMPTY)]", "[]"},
                      // $$ is a literal $, so $$(A) is not a reference.
                      ExpandCase{"$$", "$"}, ExpandCase{"$$(A)", "$(A)"},
                      ExpandCase{"$$$(A)", "$a"}, ExpandCase{"cost: 5$$", "cost: 5$"},
                      // Unknown, unclosed, and $ before anything else: as written.
                      ExpandCase{"$(UNKNOWN)", "$(UNKNOWN)"}, ExpandCase{"$()", "$()"},
                      ExpandCase{"$(A", "$(A"}, ExpandCase{"x$(", "x$("}, ExpandCase{"$A", "$A"},
                      ExpandCase{"a$", "a$"}, ExpandCase{"$", "$"},
                      // A value is not expanded again.
                      ExpandCase{"$(DOLLAR)", "$(A)"},
                      ExpandCase{"$(A)$(UNKNOWN)$(A", "a$(UNKNOWN)$(A"}));

manifest::Job SmallJob() {
  manifest::Job job;
  job.name = "mlp";
  job.namespace_ = "team-a";
  job.workers.replicas = 3;
  job.dataset = {6000, 100, 2, true, 7};
  job.model.features = 32;
  job.model.learning_rate = 0.05;
  job.model.global_batch_size = 192;
  return job;
}

TEST(WorkerEnv, EveryVariableForOneIncarnation) {
  WorkerPlacement p;
  p.sharding_addr = "127.0.0.1:4000";
  p.ps_addrs = {"127.0.0.1:5000", "127.0.0.1:5001"};
  p.agent_addr = "127.0.0.1:6001";
  p.checkpoint_path = "/w/checkpoint";
  p.rank = 1;
  p.incarnation = 2;
  p.local_batch = 70;
  p.journal = "/w/worker-1.journal";
  p.loss_log = "/w/worker-1.loss.jsonl";
  p.mode = kModePlain;
  p.node_speed_file = "/w/nodes/node-1.speed";
  p.master_addr = "127.0.0.1";
  p.master_port = 29500;
  const EnvList env = WorkerEnv(SmallJob(), p);
  EXPECT_THAT(
      env, ElementsAre(
               Pair("ANTDT_JOB", "mlp"), Pair("ANTDT_NAMESPACE", "team-a"),
               Pair("ANTDT_DATASET", "train"), Pair("ANTDT_WORKERS", "3"),
               Pair("ANTDT_SHARDING_ADDR", "127.0.0.1:4000"),
               Pair("ANTDT_PS_ADDRS", "127.0.0.1:5000,127.0.0.1:5001"),
               Pair("ANTDT_AGENT_ADDR", "127.0.0.1:6001"), Pair("ANTDT_GLOBAL_BATCH", "192"),
               Pair("ANTDT_FEATURES", "32"), Pair("ANTDT_LEARNING_RATE", "0.05"),
               Pair("ANTDT_CHECKPOINT_PATH", "/w/checkpoint"), Pair("ANTDT_WORKER_ID", "worker-1"),
               Pair("ANTDT_INCARNATION", "2"), Pair("ANTDT_LOCAL_BATCH", "70"),
               Pair("ANTDT_RECORDS", "6000"), Pair("ANTDT_EPOCHS", "2"),
               Pair("ANTDT_SHARD_SIZE", "100"), Pair("ANTDT_SHUFFLE", "true"),
               Pair("ANTDT_SEED", "7"), Pair("ANTDT_JOURNAL", "/w/worker-1.journal"),
               Pair("ANTDT_LOSS_LOG", "/w/worker-1.loss.jsonl"), Pair("ANTDT_MODE", "plain"),
               Pair("ANTDT_NODE_SPEED_FILE", "/w/nodes/node-1.speed"),
               Pair("MASTER_ADDR", "127.0.0.1"), Pair("MASTER_PORT", "29500"), Pair("RANK", "1"),
               Pair("WORLD_SIZE", "3"), Pair("LOCAL_RANK", "0")));
  // No parameter servers: the variable is there, empty.
  p.ps_addrs.clear();
  EXPECT_THAT(WorkerEnv(SmallJob(), p), ::testing::Contains(Pair(kEnvPsAddrs, "")));
}

manifest::ContainerSpec Container() {
  manifest::ContainerSpec c;
  c.command = {"python3", "$(SCRIPT)"};
  c.args = {"--rank=$(RANK)", "--batch", "$(ANTDT_LOCAL_BATCH)", "$(NOPE)", "$$(RANK)"};
  c.env = {
      {"SCRIPT", "train.py", false},
      {"OUT", "/out/$(ANTDT_WORKER_ID)-$(SCRIPT)", false},  // over base and earlier entries
      {"EARLY", "$(LATER)", false},                         // not yet defined: as written
      {"LATER", "x", false},
      {"RANK", "r$(RANK)", false},  // replaces the base's RANK in place
  };
  return c;
}

TEST(ContainerEnv, EntriesInOrderOverTheBaseThenTheCommand) {
  const EnvList base = {
      {"ANTDT_WORKER_ID", "worker-2"}, {"RANK", "2"}, {"ANTDT_LOCAL_BATCH", "64"}};
  absl::StatusOr<EnvList> env = ContainerEnv(base, Container(), "c");
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_THAT(*env, ElementsAre(Pair("ANTDT_WORKER_ID", "worker-2"), Pair("RANK", "r2"),
                                Pair("ANTDT_LOCAL_BATCH", "64"), Pair("SCRIPT", "train.py"),
                                Pair("OUT", "/out/worker-2-train.py"), Pair("EARLY", "$(LATER)"),
                                Pair("LATER", "x")));
  EXPECT_THAT(ContainerArgv(Container(), *env), ElementsAre("python3", "train.py", "--rank=r2",
                                                            "--batch", "64", "$(NOPE)", "$(RANK)"));
}

TEST(ContainerEnv, ValueFromIsAnErrorNamingTheField) {
  manifest::ContainerSpec c = Container();
  c.env.push_back({"POD_IP", "", true});
  absl::StatusOr<EnvList> env = ContainerEnv({}, c, "spec.workers.template.spec.containers[0]");
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(std::string(env.status().message()),
              ::testing::StartsWith("spec.workers.template.spec.containers[0].env[5].valueFrom: "));
}

}  // namespace
}  // namespace antdt::jobconfig
