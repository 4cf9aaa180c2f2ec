#include "services/agent/core/agent.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/credential.h"
#include "prometheus/text_serializer.h"

namespace antdt::agent {
namespace {

v1::AgentMessage Step(const std::string& worker) {
  v1::AgentMessage m;
  m.mutable_step()->set_worker_id(worker);
  return m;
}

TEST(Outbox, KeepsTheNewestAndCountsDrops) {
  Outbox box(3);
  v1::AgentMessage sample;
  sample.mutable_node_sample()->set_node("n");
  box.Push(sample);
  for (int i = 0; i < 4; ++i) box.Push(Step("w" + std::to_string(i)));
  EXPECT_EQ(box.size(), 3u);
  EXPECT_EQ(box.dropped_node_samples(), 1);
  EXPECT_EQ(box.dropped_step_reports(), 1);
  auto first = box.Peek(0);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->step().worker_id(), "w1");
  // Peek does not remove: a failed write loses nothing.
  EXPECT_EQ(box.Peek(0)->step().worker_id(), "w1");
  box.Pop();
  EXPECT_EQ(box.Peek(0)->step().worker_id(), "w2");
  box.Close();
  EXPECT_FALSE(box.Peek(1000));
}

// The reports of a message Take returned, by worker id.
std::vector<std::string> Workers(const v1::AgentMessage& m) {
  std::vector<std::string> out;
  if (m.has_step()) out.push_back(m.step().worker_id());
  for (const v1::StepReport& s : m.steps().steps()) out.push_back(s.worker_id());
  return out;
}

TEST(Outbox, TakesQueuedStepReportsAsOneBatchInOrder) {
  Outbox box(100);
  const Outbox::Batching batching{/*max_reports=*/4, /*linger_ms=*/0};
  box.Push(Step("w0"));
  v1::AgentMessage two;  // one SDK call's batch
  *two.mutable_steps()->add_steps() = Step("w1").step();
  *two.mutable_steps()->add_steps() = Step("w2").step();
  box.Push(two);
  v1::AgentMessage sample;
  sample.mutable_node_sample()->set_node("n");
  box.Push(sample);
  for (const char* w : {"w3", "w4", "w5", "w6", "w7", "w8"}) box.Push(Step(w));

  auto m = box.Take(0, batching);  // up to the node sample: it is not held back
  ASSERT_TRUE(m);
  EXPECT_EQ(Workers(*m), (std::vector<std::string>{"w0", "w1", "w2"}));
  EXPECT_TRUE(m->has_steps());
  m = box.Take(0, batching);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->node_sample().node(), "n");
  m = box.Take(0, batching);  // at most max_reports
  ASSERT_TRUE(m);
  EXPECT_EQ(Workers(*m), (std::vector<std::string>{"w3", "w4", "w5", "w6"}));
  m = box.Take(0, batching);
  ASSERT_TRUE(m);
  EXPECT_EQ(Workers(*m), (std::vector<std::string>{"w7", "w8"}));
  EXPECT_EQ(box.size(), 0u);
  box.Push(Step("w9"));  // a lone report stays a `step`
  m = box.Take(0, batching);
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->has_step());
  EXPECT_EQ(m->step().worker_id(), "w9");
  EXPECT_EQ(box.dropped_step_reports(), 0);
  box.Close();
  EXPECT_FALSE(box.Take(1000, batching));
}

// A failed write loses nothing: the batch goes back in front, and is counted
// report by report if the Outbox, full meanwhile, drops it.
TEST(Outbox, PutBackReturnsABatchToTheFront) {
  Outbox box(3);
  const Outbox::Batching batching{/*max_reports=*/2, /*linger_ms=*/0};
  for (const char* w : {"w0", "w1", "w2"}) box.Push(Step(w));
  auto m = box.Take(0, batching);
  ASSERT_TRUE(m);
  EXPECT_EQ(Workers(*m), (std::vector<std::string>{"w0", "w1"}));
  box.PutBack(*m);
  EXPECT_EQ(box.size(), 2u);
  m = box.Take(0, batching);  // the same batch first (w2 does not fit in it)
  ASSERT_TRUE(m);
  EXPECT_EQ(Workers(*m), (std::vector<std::string>{"w0", "w1"}));
  box.Push(Step("w3"));
  box.Push(Step("w4"));
  box.PutBack(*m);  // w0+w1, w2, w3, w4: over capacity, the oldest (the batch) goes
  EXPECT_EQ(box.size(), 3u);
  EXPECT_EQ(box.dropped_step_reports(), 2);
  m = box.Take(0, batching);
  ASSERT_TRUE(m);
  EXPECT_EQ(Workers(*m), (std::vector<std::string>{"w2", "w3"}));
}

// A report waits up to linger_ms for others; once max_reports are queued it
// goes at once, with those that came meanwhile.
TEST(Outbox, TakeLingersForMoreReports) {
  Outbox box(100);
  box.Push(Step("w0"));
  std::optional<v1::AgentMessage> m;
  std::thread sender([&] { m = box.Take(0, {/*max_reports=*/3, /*linger_ms=*/600'000}); });
  box.Push(Step("w1"));
  box.Push(Step("w2"));
  sender.join();
  ASSERT_TRUE(m);
  EXPECT_EQ(Workers(*m), (std::vector<std::string>{"w0", "w1", "w2"}));
  // Alone, a report goes once it has waited linger_ms.
  box.Push(Step("w3"));
  m = box.Take(0, {/*max_reports=*/3, /*linger_ms=*/1});
  ASSERT_TRUE(m);
  EXPECT_EQ(Workers(*m), (std::vector<std::string>{"w3"}));
}

TEST(DirectiveTable, HandsOutOnlyNewerVersions) {
  DirectiveTable table;
  v1::Directive d;
  d.set_job("j");
  d.set_worker_id("w");
  d.set_version(2);
  d.mutable_adjust_batch()->set_local_batch_size(48);
  table.Put(d);
  d.set_version(1);  // an older one arriving late is ignored
  table.Put(d);
  ASSERT_EQ(table.Newer("", "j", "w", 0).size(), 1u);
  EXPECT_EQ(table.Newer("", "j", "w", 0)[0].version(), 2);
  EXPECT_EQ(table.Newer("", "j", "w", 0)[0].adjust_batch().local_batch_size(), 48);
  EXPECT_TRUE(table.Newer("", "j", "w", 2).empty());
  EXPECT_TRUE(table.Newer("", "j", "other", 0).empty());
}

// A parameter server's move does not hide a batch change sent before it (nor
// the other way round): the newest of each kind, oldest first.
TEST(DirectiveTable, KeepsTheNewestOfEachKind) {
  DirectiveTable table;
  v1::Directive adjust;
  adjust.set_job("j");
  adjust.set_worker_id("w");
  adjust.set_version(3);
  adjust.mutable_adjust_batch()->set_local_batch_size(40);
  table.Put(adjust);
  v1::Directive move = adjust;
  move.set_version(4);
  move.mutable_move_parameter_server()->set_ps_id("ps-1");
  move.mutable_move_parameter_server()->set_address("127.0.0.1:7");
  table.Put(move);
  std::vector<v1::Directive> got = table.Newer("", "j", "w", 0);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].has_adjust_batch());
  EXPECT_TRUE(got[1].has_move_parameter_server());
  ASSERT_EQ(table.Newer("", "j", "w", 3).size(), 1u);
  EXPECT_TRUE(table.Newer("", "j", "w", 3)[0].has_move_parameter_server());
  adjust.set_version(5);  // a newer batch change replaces the older one only
  table.Put(adjust);
  got = table.Newer("", "j", "w", 0);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].version(), 4);
  EXPECT_EQ(got[1].version(), 5);
}

// Jobs are namespace/name: the same job and worker names in two namespaces
// get their own directives; a worker that names no namespace gets its job's.
TEST(DirectiveTable, KeepsNamespacesApart) {
  DirectiveTable table;
  v1::Directive d;
  d.set_job("train");
  d.set_worker_id("worker-1");
  d.set_namespace_("team-a");
  d.set_version(5);
  d.mutable_adjust_batch()->set_local_batch_size(20);
  table.Put(d);
  EXPECT_TRUE(table.Newer("team-b", "train", "worker-1", 0).empty());
  ASSERT_EQ(table.Newer("team-a", "train", "worker-1", 0).size(), 1u);
  ASSERT_EQ(table.Newer("", "train", "worker-1", 0).size(), 1u);  // an older SDK
  d.set_namespace_("team-b");
  d.set_version(3);
  d.mutable_adjust_batch()->set_local_batch_size(90);
  table.Put(d);
  EXPECT_EQ(table.Newer("team-b", "train", "worker-1", 0)[0].adjust_batch().local_batch_size(), 90);
  EXPECT_EQ(table.Newer("team-a", "train", "worker-1", 0)[0].adjust_batch().local_batch_size(), 20);
}

TEST(ValidateStep, NamesTheField) {
  v1::StepReport ok;
  ok.set_job("j");
  ok.set_worker_id("w");
  ok.set_role("worker");
  ok.set_bpt_seconds(0.1);
  ok.set_samples(32);
  EXPECT_TRUE(ValidateStep(ok).ok());
  struct Case {
    std::function<void(v1::StepReport&)> mutate;
    std::string field;
  } cases[] = {
      {[](v1::StepReport& s) { s.set_job(""); }, "step.job"},
      {[](v1::StepReport& s) { s.set_worker_id(""); }, "step.worker_id"},
      {[](v1::StepReport& s) { s.set_role("chief"); }, "step.role"},
      {[](v1::StepReport& s) { s.set_bpt_seconds(-1); }, "step.bpt_seconds"},
      {[](v1::StepReport& s) { s.set_bpt_seconds(std::nan("")); }, "step.bpt_seconds"},
      {[](v1::StepReport& s) { s.set_samples(-3); }, "step.samples"},
      {[](v1::StepReport& s) { (*s.mutable_ps_latency_seconds())["ps-0"] = -1; },
       "ps_latency_seconds[ps-0]"},
  };
  for (const Case& c : cases) {
    v1::StepReport s = ok;
    c.mutate(s);
    absl::Status st = ValidateStep(s);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(st.message().find(c.field), std::string::npos) << st;
  }
}

// A worker restarted on another node (or done) stops reporting here: after
// the idle time its series go, another job's worker of the same name stays,
// and the Monitor's health for it is dropped from the node's view.
TEST(AgentService, ForgetsAWorkerThatLeftTheNode) {
  Outbox box(100);
  DirectiveTable table;
  prometheus::Registry registry;
  AgentServiceImpl service("node-a", &box, &table, registry);
  grpc::ServerContext ctx;
  v1::ReportStepResponse resp;
  auto report = [&](const std::string& job) {
    v1::ReportStepRequest req;
    req.mutable_step()->set_job(job);
    req.mutable_step()->set_worker_id("worker-1");
    req.mutable_step()->set_role("worker");
    req.mutable_step()->set_bpt_seconds(0.5);
    req.mutable_step()->set_samples(100);
    ASSERT_TRUE(service.ReportStep(&ctx, &req, &resp).ok());
  };
  report("old");
  report("other");
  NodeView view;
  v1::HealthUpdate health;
  health.add_workers()->set_job("old");
  health.mutable_workers(0)->set_worker_id("worker-1");
  health.mutable_workers(0)->set_class_(v1::PERSISTENT);
  view.SetHealth(health);
  auto text = [&] { return prometheus::TextSerializer().Serialize(registry.Collect()); };
  EXPECT_NE(text().find("job=\"old\""), std::string::npos);
  EXPECT_TRUE(service.ForgetIdle(std::chrono::hours(1)).empty());

  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  report("other");  // still reporting
  const auto forgotten = service.ForgetIdle(std::chrono::milliseconds(20));
  ASSERT_EQ(forgotten.size(), 1u);
  EXPECT_EQ(forgotten[0], std::make_pair(std::string("old"), std::string("worker-1")));
  for (const auto& [job, worker] : forgotten) view.Forget(job, worker);
  EXPECT_EQ(text().find("job=\"old\""), std::string::npos) << text();
  EXPECT_NE(text().find("antdt_worker_samples_per_second{job=\"other\""), std::string::npos);
  EXPECT_TRUE(view.health().empty());
  report("old");  // it comes back: its series start again
  EXPECT_NE(
      text().find("antdt_worker_steps_total{job=\"old\",role=\"worker\",worker=\"worker-1\"} 1"),
      std::string::npos)
      << text();
}

// A worker killed to be restarted elsewhere: its process, seen running, has
// ended, so its series go at once, not after the idle time; a process never
// seen running (a pid the check cannot place), or a pod's, waits for it.
TEST(AgentService, ForgetsAWorkerWhoseProcessEndedAtOnce) {
  Outbox box(100);
  DirectiveTable table;
  prometheus::Registry registry;
  AgentServiceImpl service("node-a", &box, &table, registry);
  grpc::ServerContext ctx;
  v1::ReportStepResponse resp;
  auto report = [&](const std::string& worker, int32_t pid, const std::string& pod_uid) {
    v1::ReportStepRequest req;
    req.mutable_step()->set_job("paper-mix");
    req.mutable_step()->set_worker_id(worker);
    req.mutable_step()->set_role("worker");
    req.mutable_step()->set_bpt_seconds(0.5);
    req.mutable_step()->set_samples(100);
    req.mutable_step()->set_pid(pid);
    req.mutable_step()->set_pod_uid(pod_uid);
    ASSERT_TRUE(service.ReportStep(&ctx, &req, &resp).ok());
  };
  report("worker-1", 101, "");
  report("worker-2", 102, "");     // its pid never seen running
  report("worker-3", 103, "uid");  // a pod's
  std::set<int64_t> running = {101, 103};
  auto check = [&](int64_t pid) -> std::optional<bool> { return running.count(pid) > 0; };
  const auto idle = std::chrono::hours(1);
  EXPECT_TRUE(service.ForgetIdle(idle, check).empty());
  running.clear();  // every process ended
  const auto forgotten = service.ForgetIdle(idle, check);
  ASSERT_EQ(forgotten.size(), 1u);
  EXPECT_EQ(forgotten[0].second, "worker-1");
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_EQ(text.find("worker=\"worker-1\""), std::string::npos) << text;
  EXPECT_NE(text.find("worker=\"worker-2\""), std::string::npos) << text;
  EXPECT_NE(text.find("worker=\"worker-3\""), std::string::npos) << text;
  // Its new incarnation on this node (another pid) is a new process to watch.
  report("worker-1", 201, "");
  EXPECT_TRUE(service.ForgetIdle(idle, check).empty());
}

// One step of worker `worker` of job "train" (0.5 s, 100 samples).
v1::ReportStepRequest OneStep(const std::string& worker) {
  v1::ReportStepRequest req;
  req.mutable_step()->set_job("train");
  req.mutable_step()->set_worker_id(worker);
  req.mutable_step()->set_role("worker");
  req.mutable_step()->set_bpt_seconds(0.5);
  req.mutable_step()->set_samples(100);
  return req;
}

// The credential digest the Monitor checks is the agent's to set, from the
// call's own credential: a worker's claim in the report is replaced (here by
// none, the call carrying no token).
TEST(AgentService, AWorkersOwnCredentialDigestIsReplaced) {
  Outbox box(100);
  DirectiveTable table;
  prometheus::Registry registry;
  AgentServiceImpl service("node-a", &box, &table, registry);
  grpc::ServerContext ctx;
  v1::ReportStepResponse resp;
  v1::ReportStepRequest req = OneStep("worker-1");
  req.mutable_step()->set_credential_digest(std::string(32, 'x'));
  ASSERT_TRUE(service.ReportStep(&ctx, &req, &resp).ok());
  std::optional<v1::AgentMessage> sent = box.Peek(1000);
  ASSERT_TRUE(sent.has_value());
  ASSERT_TRUE(sent->has_step());
  EXPECT_EQ(sent->step().credential_digest(), "");
  EXPECT_EQ(sent->step().node(), "node-a");
}

// Once the Monitor sent a job's credential digest, the agent refuses that
// job's reports without it (UNAUTHENTICATED), forwards nothing, hands out no
// directive and counts the refusal; other jobs' reports pass as before.
TEST(AgentService, RefusesAJobsReportsWithoutItsCredential) {
  Outbox box(100);
  DirectiveTable table;
  prometheus::Registry registry;
  AgentServiceImpl service("node-a", &box, &table, registry);
  v1::JobCredentials credentials;
  v1::JobDigest* d = credentials.add_jobs();
  d->set_job("train");
  d->set_digest(TokenDigest("the-jobs-token"));
  table.SetJobCredentials(credentials);
  v1::Directive directive;
  directive.set_job("train");
  directive.set_worker_id("worker-1");
  directive.set_version(3);
  directive.mutable_adjust_batch()->set_local_batch_size(8);
  table.Put(directive);
  grpc::ServerContext ctx;
  v1::ReportStepResponse resp;
  v1::ReportStepRequest req = OneStep("worker-1");
  EXPECT_EQ(service.ReportStep(&ctx, &req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(resp.directives_size(), 0);
  EXPECT_FALSE(box.Peek(100).has_value());
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(text.find("antdt_agent_step_reports_refused_total{reason=\"missing\"} 1"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("antdt_worker_steps_total{"), std::string::npos) << text;
  EXPECT_TRUE(table.CredentialAccepted("", "train", TokenDigest("the-jobs-token")));
  EXPECT_FALSE(table.CredentialAccepted("", "train", TokenDigest("another")));
  req.mutable_step()->set_job("other-job");  // a job the Monitor sent nothing of
  EXPECT_TRUE(service.ReportStep(&ctx, &req, &resp).ok());
}

// A worker that reports its namespace gets it on every series of it: step
// metrics, and the Monitor's judgement the agent re-exports.
TEST(AgentService, LabelsAWorkersSeriesWithTheNamespaceItReports) {
  Outbox box(100);
  DirectiveTable table;
  prometheus::Registry registry;
  AgentServiceImpl service("node-a", &box, &table, registry);
  grpc::ServerContext ctx;
  v1::ReportStepResponse resp;
  v1::ReportStepRequest req = OneStep("worker-1");
  req.mutable_step()->set_namespace_("team-a");
  ASSERT_TRUE(service.ReportStep(&ctx, &req, &resp).ok());
  req.mutable_step()->clear_namespace_();  // an older SDK: no namespace
  req.mutable_step()->set_worker_id("worker-2");
  ASSERT_TRUE(service.ReportStep(&ctx, &req, &resp).ok());
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(text.find("antdt_worker_steps_total{job=\"train\",namespace=\"team-a\",role=\"worker\","
                      "worker=\"worker-1\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("antdt_worker_steps_total{job=\"train\",role=\"worker\",worker=\"worker-2\"} 1"),
      std::string::npos)
      << text;
  EXPECT_EQ(service.NamespaceOf("train", "worker-1"), "team-a");
  EXPECT_EQ(service.NamespaceOf("train", "worker-2"), "");
  EXPECT_EQ(service.NamespaceOf("train", "worker-9"), "");

  NodeView view;
  v1::HealthUpdate health;
  for (const char* id : {"worker-1", "worker-2"}) {
    v1::WorkerHealth* w = health.add_workers();
    w->set_job("train");
    w->set_worker_id(id);
    w->set_role("worker");
    w->set_class_(v1::HEALTHY);
  }
  view.SetHealth(health);
  auto collector = MakeNodeCollector(&view, [&](const std::string& job, const std::string& worker) {
    return service.NamespaceOf(job, worker);
  });
  const std::string node = prometheus::TextSerializer().Serialize(collector->Collect());
  EXPECT_NE(
      node.find("antdt_worker_straggler_class{job=\"train\",worker=\"worker-1\",role=\"worker\","
                "namespace=\"team-a\"} 1"),
      std::string::npos)
      << node;
  EXPECT_NE(
      node.find(
          "antdt_worker_straggler_class{job=\"train\",worker=\"worker-2\",role=\"worker\"} 1"),
      std::string::npos)
      << node;
}

TEST(AgentService, StampsTheNodeQueuesTheStepAndReturnsDirectives) {
  Outbox box(10);
  DirectiveTable table;
  prometheus::Registry registry;
  AgentServiceImpl service("node-a", &box, &table, registry);
  v1::Directive d;
  d.set_job("j");
  d.set_worker_id("w");
  d.set_version(1);
  table.Put(d);
  v1::ReportStepRequest req;
  req.mutable_step()->set_job("j");
  req.mutable_step()->set_worker_id("w");
  req.mutable_step()->set_role("worker");
  req.mutable_step()->set_bpt_seconds(0.5);
  req.mutable_step()->set_samples(100);
  v1::ReportStepResponse resp;
  grpc::ServerContext ctx;
  ASSERT_TRUE(service.ReportStep(&ctx, &req, &resp).ok());
  ASSERT_EQ(resp.directives_size(), 1);
  auto queued = box.Peek(0);
  ASSERT_TRUE(queued);
  EXPECT_EQ(queued->step().node(), "node-a");
  EXPECT_GT(queued->step().time_unix_ms(), 0);
  req.set_applied_directive_version(1);
  resp.Clear();
  ASSERT_TRUE(service.ReportStep(&ctx, &req, &resp).ok());
  EXPECT_EQ(resp.directives_size(), 0);
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(text.find("antdt_worker_steps_total{job=\"j\",role=\"worker\",worker=\"w\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("antdt_worker_samples_per_second{job=\"j\",role=\"worker\",worker=\"w\"} 200"),
      std::string::npos)
      << text;
  req.mutable_step()->set_role("");
  EXPECT_EQ(service.ReportStep(&ctx, &req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(box.size(), 2u);  // the refused report was not queued
}

TEST(AgentService, TakesABatchOfStepsOfOneWorker) {
  Outbox box(10);
  DirectiveTable table;
  prometheus::Registry registry;
  AgentServiceImpl service("node-a", &box, &table, registry);
  v1::ReportStepRequest req;
  for (int i = 0; i < 3; ++i) {
    v1::StepReport* s = req.add_steps();
    s->set_job("j");
    s->set_worker_id("w");
    s->set_role("worker");
    s->set_step(i);
    s->set_bpt_seconds(0.1);
    s->set_samples(10);
  }
  req.mutable_steps(1)->set_batch_samples(32);  // cut at its deadline: 10 of 32
  v1::ReportStepResponse resp;
  grpc::ServerContext ctx;
  ASSERT_TRUE(service.ReportStep(&ctx, &req, &resp).ok());
  auto queued = box.Peek(0);
  ASSERT_TRUE(queued);
  ASSERT_EQ(queued->steps().steps_size(), 3);
  EXPECT_EQ(queued->steps().steps(2).node(), "node-a");
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(text.find("antdt_worker_steps_total{job=\"j\",role=\"worker\",worker=\"w\"} 3"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("antdt_worker_steps_cut_total{job=\"j\",role=\"worker\",worker=\"w\"} 1"),
            std::string::npos)
      << text;
  EXPECT_EQ(queued->steps().steps(1).batch_samples(), 32) << "forwarded to the Monitor";
  // One call carries one worker's steps; anything else is refused whole.
  req.mutable_steps(1)->set_worker_id("other");
  EXPECT_EQ(service.ReportStep(&ctx, &req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req.mutable_steps(1)->set_worker_id("w");
  // A bad step is named by its place in the batch, and refuses the whole call:
  // nothing queued, nothing counted.
  req.mutable_steps(2)->set_bpt_seconds(-1);
  grpc::Status bad = service.ReportStep(&ctx, &req, &resp);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad.error_message().rfind("steps[2].bpt_seconds: ", 0), 0u) << bad.error_message();
  req.mutable_steps(2)->set_bpt_seconds(0.1);
  req.mutable_steps(2)->set_batch_samples(-1);
  bad = service.ReportStep(&ctx, &req, &resp);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad.error_message().rfind("steps[2].batch_samples: ", 0), 0u) << bad.error_message();
  req.Clear();
  EXPECT_EQ(service.ReportStep(&ctx, &req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(box.size(), 1u);
  EXPECT_NE(prometheus::TextSerializer()
                .Serialize(registry.Collect())
                .find("antdt_worker_steps_total{job=\"j\",role=\"worker\",worker=\"w\"} 3"),
            std::string::npos);
  // The Outbox counts every step of a dropped batch.
  Outbox small(1);
  small.Push(*queued);
  small.Push(*queued);
  EXPECT_EQ(small.dropped_step_reports(), 3);
}

TEST(NodeCollector, ExportsSignalsAndScores) {
  NodeView view;
  v1::NodeSample s;
  s.set_node("n1");
  s.set_time_unix_ms(1);
  s.mutable_cpu()->set_utilization(0.5);
  s.mutable_pressure()->set_cpu_some_avg10(12.5);
  auto* g = s.add_gpus();
  g->set_index(0);
  g->set_name("H200");
  g->set_thermal_throttling(true);
  for (const char* name : {"eth0", "lo", "veth3f2a", "cali9c1", "cni0", "docker0"}) {
    auto* n = s.add_net();
    n->set_name(name);
    n->set_rx_bytes_per_second(100);
  }
  view.SetSample(s);
  v1::HealthUpdate h;
  auto* w = h.add_workers();
  w->set_job("j");
  w->set_worker_id("w1");
  w->set_role("worker");
  w->set_score(2.5);
  w->set_class_(v1::PERSISTENT);
  view.SetHealth(h);
  auto collector = MakeNodeCollector(&view);
  const std::string text = prometheus::TextSerializer().Serialize(collector->Collect());
  for (const char* want : {
           "antdt_node_cpu_utilization_ratio{node=\"n1\"} 0.5",
           "antdt_node_pressure_stall_ratio{node=\"n1\",resource=\"cpu\",kind=\"some\"} 0.125",
           "antdt_gpu_thermal_throttling{node=\"n1\",gpu=\"0\",model=\"H200\"} 1",
           "antdt_worker_straggler_score{job=\"j\",worker=\"w1\",role=\"worker\"} 2.5",
           "antdt_worker_straggler_class{job=\"j\",worker=\"w1\",role=\"worker\"} 5",
       }) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  // The host's interface is a label value; loopback and per-pod links are not.
  EXPECT_NE(text.find("interface=\"eth0\""), std::string::npos) << text;
  for (const char* link : {"\"lo\"", "veth3f2a", "cali9c1", "cni0", "docker0"}) {
    EXPECT_EQ(text.find(link), std::string::npos) << link << "\n" << text;
  }
}

}  // namespace
}  // namespace antdt::agent

#include "services/agent/core/config.h"

namespace antdt::agent {
namespace {

TEST(AgentConfig, ParsesListsMapsAndDurationsAndNamesBadFields) {
  auto c = ParseAgentConfig(
      "node: n1\ncgroups: [kubepods/a, kubepods/b]\nlabels: {antdt.io/hardware: h200}\n"
      "interval: 500ms\nmonitor: 127.0.0.1:7071\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->node, "n1");
  EXPECT_EQ(c->cgroups, (std::vector<std::string>{"kubepods/a", "kubepods/b"}));
  EXPECT_EQ(c->labels.at("antdt.io/hardware"), "h200");
  EXPECT_EQ(c->interval_ms, 500);
  for (const auto& [yaml, field] : std::vector<std::pair<std::string, std::string>>{
           {"interval: 10ms\n", "interval"},
           {"monitor: nowhere\n", "monitor"},
           {"buffer: -3\n", "buffer"},
           {"worker_idle_after: 10ms\n", "worker_idle_after"},
           {"bogus: 1\n", "bogus"},
           {"labels: {zone: [a]}\n", "labels.zone"}}) {
    auto r = ParseAgentConfig(yaml);
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace antdt::agent
