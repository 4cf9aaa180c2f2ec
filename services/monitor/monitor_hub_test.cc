#include "services/monitor/monitor_hub.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <vector>

#include "api/vocab/vocab.h"
#include "common/credential.h"
#include "common/process.h"
#include "prometheus/text_serializer.h"

namespace antdt::monitor {
namespace {

constexpr char kJob[] = "team/ctr";
constexpr int64_t kWindowMs = 10'000;
constexpr int64_t kCloseAfterMs = kWindowMs + 2'000;  // the window plus the allowed lateness

// An agent's end of a stream: keeps what the hub wrote to it.
class Inbox {
 public:
  MonitorHub::Writer Writer() {
    return [this](const v1::MonitorMessage& message) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!accept_) return false;
      messages_.push_back(message);
      return true;
    };
  }
  void Fail() {
    std::lock_guard<std::mutex> lock(mu_);
    accept_ = false;
  }
  std::vector<v1::MonitorMessage> Messages() const {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }

 private:
  mutable std::mutex mu_;
  bool accept_ = true;
  std::vector<v1::MonitorMessage> messages_;
};

v1::AgentMessage Hello(const std::string& node, std::map<std::string, std::string> labels = {}) {
  v1::AgentMessage m;
  m.mutable_hello()->set_node(node);
  for (const auto& [k, v] : labels) (*m.mutable_hello()->mutable_labels())[k] = v;
  return m;
}

v1::AgentMessage Step(const std::string& worker, const std::string& node, double bpt,
                      int64_t time_ms) {
  v1::AgentMessage m;
  v1::StepReport& r = *m.mutable_step();
  r.set_job(kJob);
  r.set_worker_id(worker);
  r.set_node(node);
  r.set_samples(64);
  r.set_bpt_seconds(bpt);
  r.set_time_unix_ms(time_ms);
  return m;
}

// The reports of `steps` in one message (StepBatch), as an agent batches them.
v1::AgentMessage Batch(const std::vector<v1::AgentMessage>& steps) {
  v1::AgentMessage m;
  for (const v1::AgentMessage& s : steps) *m.mutable_steps()->add_steps() = s.step();
  return m;
}

v1::Directive Directive(const std::string& worker) {
  v1::Directive d;
  d.set_job(kJob);
  d.set_worker_id(worker);
  d.set_version(1);
  d.mutable_adjust_batch();
  return d;
}

class MonitorHubTest : public ::testing::Test {
 protected:
  MonitorHubTest() : hub_(*Monitor::Create(MonitorConfig{}), &clock_) {}

  // Three workers, w-2 on node-b three times slower than its peers on node-a,
  // report one window through `stream`; the clock moves past its close.
  void ReportOneWindow(MonitorHub::AgentStream& stream) {
    const int64_t t = clock_.NowMillis();
    hub_.Receive(stream, Step("w-0", "node-a", 0.1, t));
    hub_.Receive(stream, Step("w-1", "node-a", 0.1, t));
    hub_.Receive(stream, Step("w-2", "node-b", 0.3, t));
    clock_.Advance(kCloseAfterMs);
  }

  FakeClock clock_;  // starts on a window boundary
  MonitorHub hub_;
};

TEST_F(MonitorHubTest, HealthNamesTheBadJob) {
  EXPECT_EQ(hub_.Health("", "").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<v1::GetJobHealthResponse> unknown = hub_.Health("", kJob);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(), "job: no reports seen for job team/ctr");
}

TEST_F(MonitorHubTest, HealthClassifiesTheReportedWorkersOnceTheWindowCloses) {
  Inbox inbox;
  auto stream = hub_.OpenStream("peer-a", inbox.Writer());
  hub_.Receive(*stream, Hello("node-a"));
  ReportOneWindow(*stream);

  absl::StatusOr<v1::GetJobHealthResponse> open = hub_.Health("", kJob);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(open->workers_size(), 0);  // nothing closed yet

  hub_.Tick();
  absl::StatusOr<v1::GetJobHealthResponse> health = hub_.Health("", kJob);
  ASSERT_TRUE(health.ok()) << health.status();
  ASSERT_EQ(health->workers_size(), 3);
  EXPECT_EQ(health->workers(2).worker_id(), "w-2");
  EXPECT_EQ(health->workers(2).class_(), v1::TRANSIENT);
  EXPECT_EQ(health->time_unix_ms(), clock_.NowMillis());
}

TEST_F(MonitorHubTest, TickSendsEachAgentItsNodesWorkersOnlyWhenAWindowClosed) {
  Inbox a, b, silent;
  auto sa = hub_.OpenStream("peer-a", a.Writer());
  auto sb = hub_.OpenStream("peer-b", b.Writer());
  auto unnamed = hub_.OpenStream("peer-c", silent.Writer());  // never says hello
  hub_.Receive(*sa, Hello("node-a"));
  hub_.Receive(*sb, Hello("node-b"));
  ReportOneWindow(*sa);

  hub_.Tick();
  ASSERT_EQ(a.Messages().size(), 1u);
  ASSERT_EQ(a.Messages()[0].health().workers_size(), 2);
  EXPECT_EQ(a.Messages()[0].health().workers(0).worker_id(), "w-0");
  ASSERT_EQ(b.Messages().size(), 1u);
  ASSERT_EQ(b.Messages()[0].health().workers_size(), 1);
  EXPECT_EQ(b.Messages()[0].health().workers(0).worker_id(), "w-2");
  EXPECT_TRUE(silent.Messages().empty());

  hub_.Tick();  // no window closed since
  EXPECT_EQ(a.Messages().size(), 1u);
}

TEST_F(MonitorHubTest, DirectivesReachOnlyTheConnectedAgentOfTheNode) {
  Inbox a, b;
  EXPECT_FALSE(hub_.SendDirective("node-a", Directive("w-0")));  // nobody connected

  auto sa = hub_.OpenStream("peer-a", a.Writer());
  EXPECT_FALSE(hub_.SendDirective("node-a", Directive("w-0")));  // no hello yet
  hub_.Receive(*sa, Hello("node-a"));
  auto sb = hub_.OpenStream("peer-b", b.Writer());
  hub_.Receive(*sb, Hello("node-b"));

  EXPECT_TRUE(hub_.SendDirective("node-a", Directive("w-0")));
  ASSERT_EQ(a.Messages().size(), 1u);
  EXPECT_EQ(a.Messages()[0].directive().worker_id(), "w-0");
  EXPECT_TRUE(b.Messages().empty());
  EXPECT_FALSE(hub_.SendDirective("node-c", Directive("w-9")));

  hub_.CloseStream(*sa);
  EXPECT_FALSE(hub_.SendDirective("node-a", Directive("w-0")));
  EXPECT_EQ(a.Messages().size(), 1u);  // nothing written after the close
}

TEST_F(MonitorHubTest, AFailedWriteIsNotASentDirective) {
  Inbox a;
  auto sa = hub_.OpenStream("peer-a", a.Writer());
  hub_.Receive(*sa, Hello("node-a"));
  a.Fail();
  EXPECT_FALSE(hub_.SendDirective("node-a", Directive("w-0")));
}

TEST_F(MonitorHubTest, HelloLabelsReachTheMonitor) {
  Inbox a, b;
  auto sa = hub_.OpenStream("peer-a", a.Writer());
  auto sb = hub_.OpenStream("peer-b", b.Writer());
  hub_.Receive(*sa, Hello("node-a"));
  hub_.Receive(*sb, Hello("node-b", {{"antdt.io/device-speed", "0.5"}}));
  ReportOneWindow(*sa);
  hub_.Tick();

  absl::StatusOr<v1::GetJobHealthResponse> health = hub_.Health("", kJob);
  ASSERT_TRUE(health.ok()) << health.status();
  ASSERT_EQ(health->workers_size(), 3);
  EXPECT_EQ(health->workers(2).class_(), v1::DETERMINISTIC);  // by its node's label
  EXPECT_EQ(health->workers(2).cause(), v1::HARDWARE);
}

TEST_F(MonitorHubTest, MetricsCountStreamsDropsAndHealth) {
  Inbox a;
  auto sa = hub_.OpenStream("peer-a", a.Writer());
  hub_.Receive(*sa, Hello("node-a"));
  v1::AgentMessage dropped;
  dropped.mutable_dropped()->set_step_reports(7);
  hub_.Receive(*sa, dropped);
  ReportOneWindow(*sa);
  hub_.Tick();

  const std::string text = prometheus::TextSerializer().Serialize(hub_.Collector()->Collect());
  for (const char* line : {
           "antdt_monitor_agent_streams_total 1",
           "antdt_monitor_reports_total{kind=\"step\"} 3",
           "antdt_monitor_windows_closed_total 1",
           "antdt_monitor_agent_dropped_messages_total{node=\"node-a\",kind=\"step_report\"} 7",
           "antdt_monitor_straggler_class{job=\"team/ctr\",worker=\"w-2\",role=\"worker\","
           "node=\"node-b\"} 4",
           "antdt_monitor_straggler_info{job=\"team/ctr\",worker=\"w-2\",role=\"worker\","
           "node=\"node-b\",class=\"transient\",cause=\"",
           "antdt_monitor_straggler_sample_score{job=\"team/ctr\",worker=\"w-2\",role=\"worker\","
           "node=\"node-b\"}",
           "antdt_monitor_straggler_compensated{job=\"team/ctr\",worker=\"w-2\",role=\"worker\","
           "node=\"node-b\"} 0",
           ",speed_class=\"",
           "compensated=\"false\"}",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
  }
}

v1::WorkerHealth Member(const std::string& id, v1::StragglerClass cls, v1::StragglerClass speed,
                        v1::Cause cause) {
  v1::WorkerHealth w;
  w.set_job("paper-mix");
  w.set_namespace_("default");
  w.set_worker_id(id);
  w.set_role("worker");
  w.set_node("node-" + id);
  w.set_class_(cls);
  w.set_speed_class(speed);
  w.set_compensated(!vocab::IsStraggler(cls) && vocab::IsStraggler(speed));
  w.set_cause(cause);
  return w;
}

// A compensated straggler (healthy by batch time, persistent per sample) is
// counted as a persistent straggler with its cause by name; a member that is
// no straggler has cause "none" whatever the Monitor left in its cause; no
// numeric cause series.
TEST(HealthFamiliesTest, CountEveryStragglerNowCompensatedIncluded) {
  v1::GetJobHealthResponse job;
  *job.add_workers() = Member("w-0", v1::HEALTHY, v1::PERSISTENT, v1::CPU_CONTENTION);
  *job.add_workers() = Member("w-1", v1::PERSISTENT, v1::PERSISTENT, v1::CPU_CONTENTION);
  *job.add_workers() = Member("w-2", v1::TRANSIENT, v1::HEALTHY, v1::CAUSE_UNSPECIFIED);
  *job.add_workers() = Member("w-3", v1::HEALTHY, v1::HEALTHY, v1::CPU_THROTTLING);
  *job.add_workers() = Member("w-4", v1::LEADER, v1::LEADER, v1::CAUSE_UNSPECIFIED);
  const std::string text = prometheus::TextSerializer().Serialize(HealthFamilies({job}));
  for (const char* line : {
           "antdt_monitor_stragglers{job=\"paper-mix\",class=\"persistent\",cause=\"cpu_"
           "contention\",compensated=\"true\",namespace=\"default\"} 1",
           "antdt_monitor_stragglers{job=\"paper-mix\",class=\"persistent\",cause=\"cpu_"
           "contention\",compensated=\"false\",namespace=\"default\"} 1",
           "antdt_monitor_stragglers{job=\"paper-mix\",class=\"transient\",cause=\"unknown\","
           "compensated=\"false\",namespace=\"default\"} 1",
           "antdt_monitor_straggler_info{job=\"paper-mix\",worker=\"w-0\",role=\"worker\","
           "node=\"node-w-0\",namespace=\"default\",class=\"healthy\",cause=\"cpu_contention\","
           "speed_class=\"persistent\",compensated=\"true\"} 1",
           "antdt_monitor_straggler_info{job=\"paper-mix\",worker=\"w-3\",role=\"worker\","
           "node=\"node-w-3\",namespace=\"default\",class=\"healthy\",cause=\"none\"",
           "antdt_monitor_straggler_speed_class{job=\"paper-mix\",worker=\"w-0\",role=\"worker\","
           "node=\"node-w-0\",namespace=\"default\"} 5",
           "antdt_monitor_straggler_class{job=\"paper-mix\",worker=\"w-0\",role=\"worker\","
           "node=\"node-w-0\",namespace=\"default\"} 1",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
  }
  // Three stragglers now: the compensated one, the persistent and the transient.
  int stragglers = 0;
  for (const prometheus::MetricFamily& f : HealthFamilies({job})) {
    if (f.name != "antdt_monitor_stragglers") continue;
    for (const prometheus::ClientMetric& m : f.metric)
      stragglers += static_cast<int>(m.gauge.value);
  }
  EXPECT_EQ(stragglers, 3);
  EXPECT_EQ(text.find("antdt_monitor_straggler_cause"), std::string::npos) << text;
  EXPECT_EQ(text.find("stragglers{job=\"paper-mix\",class=\"leader"), std::string::npos) << text;
  EXPECT_EQ(text.find("stragglers{job=\"paper-mix\",class=\"healthy"), std::string::npos) << text;
}

// With a step gate (the job's credential), a report without the job's digest
// is not taken in: a forged slow report for w-2 changes nothing, and is
// counted under reason "credential".
TEST_F(MonitorHubTest, AStepGateKeepsOutReportsWithoutTheJobsCredential) {
  const std::string digest = TokenDigest("the-jobs-token");
  hub_.SetStepGate(
      [&](const v1::StepReport& step) { return DigestsMatch(step.credential_digest(), digest); });
  Inbox a;
  auto sa = hub_.OpenStream("peer-a", a.Writer());
  hub_.Receive(*sa, Hello("node-a"));
  const int64_t t = clock_.NowMillis();
  for (const char* w : {"w-0", "w-1", "w-2"}) {
    v1::AgentMessage m = Step(w, "node-a", 0.1, t);
    m.mutable_step()->set_credential_digest(digest);
    hub_.Receive(*sa, m);
  }
  for (const std::string& forged : {std::string(), TokenDigest("another-jobs-token")}) {
    v1::AgentMessage m = Step("w-2", "node-a", 5.0, t);
    m.mutable_step()->set_credential_digest(forged);
    hub_.Receive(*sa, m);
  }
  clock_.Advance(kCloseAfterMs);
  hub_.Tick();
  absl::StatusOr<v1::GetJobHealthResponse> health = hub_.Health("", kJob);
  ASSERT_TRUE(health.ok()) << health.status();
  ASSERT_EQ(health->workers_size(), 3);
  for (const v1::WorkerHealth& w : health->workers()) {
    EXPECT_EQ(w.class_(), v1::HEALTHY) << w.worker_id() << ": a forged report counted";
  }
  const std::string text = prometheus::TextSerializer().Serialize(hub_.Collector()->Collect());
  EXPECT_NE(text.find("antdt_monitor_reports_dropped_total{reason=\"credential\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("antdt_monitor_reports_total{kind=\"step\"} 3"), std::string::npos) << text;
  hub_.SetStepGate(nullptr);
}

// The agents learn each job's credential digest (never its token): those
// connected when it is set, and one that connects later on its hello.
TEST_F(MonitorHubTest, AgentsAreToldTheJobsCredentialDigests) {
  Inbox a, b;
  auto sa = hub_.OpenStream("peer-a", a.Writer());
  hub_.Receive(*sa, Hello("node-a"));
  const std::string digest(32, '\x7f');
  hub_.SetJobCredential("team", "ctr", digest);
  hub_.SetJobCredential("team", "ctr", digest);  // no change: not sent again
  ASSERT_EQ(a.Messages().size(), 1u);
  ASSERT_EQ(a.Messages()[0].job_credentials().jobs_size(), 1);
  const v1::JobDigest d = a.Messages()[0].job_credentials().jobs(0);  // Messages() is a copy
  EXPECT_EQ(d.namespace_(), "team");
  EXPECT_EQ(d.job(), "ctr");
  EXPECT_EQ(d.digest(), digest);
  auto sb = hub_.OpenStream("peer-b", b.Writer());
  hub_.Receive(*sb, Hello("node-b"));
  ASSERT_EQ(b.Messages().size(), 1u);
  EXPECT_EQ(b.Messages()[0].job_credentials().jobs_size(), 1);
  // The job is gone: every agent is told the (now empty) set.
  hub_.SetJobCredential("team", "ctr", "");
  ASSERT_EQ(a.Messages().size(), 2u);
  EXPECT_EQ(a.Messages()[1].job_credentials().jobs_size(), 0);
  EXPECT_EQ(b.Messages().size(), 2u);
}

TEST_F(MonitorHubTest, TheTickerClosesWindowsUntilStopped) {
  Inbox a;
  auto sa = hub_.OpenStream("peer-a", a.Writer());
  hub_.Receive(*sa, Hello("node-a"));
  ReportOneWindow(*sa);
  hub_.Start(5);
  EXPECT_TRUE(WaitFor([&] { return !a.Messages().empty(); }, std::chrono::seconds(10)));
  hub_.Stop();
  hub_.Stop();  // idempotent
}

// A certified stream (mutual TLS) speaks only for the node its certificate
// names: a hello for another node ends it (no credentials sent), and its
// reports for another node are dropped (reason node_identity).
TEST_F(MonitorHubTest, ACertifiedStreamSpeaksOnlyForItsNode) {
  EXPECT_TRUE(CertificateNamesNode({"antdt.internal", "system:node:node-a"}, "node-a"));
  EXPECT_FALSE(CertificateNamesNode({"node-a"}, "node-a"));  // a bare name is no node's
  EXPECT_FALSE(CertificateNamesNode({"system:node:node-a"}, "node-b"));
  EXPECT_FALSE(CertificateNamesNode({"system:node:"}, ""));
  hub_.SetJobCredential("team", "ctr", TokenDigest("t"));

  Inbox forged;
  auto sf =
      hub_.OpenStream("peer-f", forged.Writer(), std::vector<std::string>{"system:node:node-b"});
  EXPECT_FALSE(hub_.Receive(*sf, Hello("node-a")));
  EXPECT_TRUE(forged.Messages().empty());  // not even the jobs' credential digests
  hub_.CloseStream(*sf);
  EXPECT_FALSE(hub_.SendDirective("node-a", Directive("w-0")));

  Inbox own;
  auto sa = hub_.OpenStream("peer-a", own.Writer(), std::vector<std::string>{"system:node:node-a"});
  EXPECT_TRUE(hub_.Receive(*sa, Hello("node-a")));
  const int64_t t = clock_.NowMillis();
  EXPECT_TRUE(hub_.Receive(*sa, Step("w-0", "node-a", 0.1, t)));
  EXPECT_TRUE(hub_.Receive(*sa, Step("w-2", "node-b", 9.0, t)));  // another node's: dropped
  EXPECT_TRUE(hub_.SendDirective("node-a", Directive("w-0")));
  hub_.RefuseStream("peer-x", "", "no_certificate");

  const std::string text = prometheus::TextSerializer().Serialize(hub_.Collector()->Collect());
  for (const char* line : {"antdt_monitor_reports_total{kind=\"step\"} 1",
                           "antdt_monitor_reports_dropped_total{reason=\"node_identity\"} 1",
                           "antdt_monitor_agent_streams_refused_total{reason=\"certificate\"} 1",
                           "antdt_monitor_agent_streams_refused_total{reason=\"no_certificate\"} 1",
                           "antdt_monitor_agent_streams_total 1"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
  }
}

// A batch is taken in as its reports would be one by one: the straggler is
// found, and a malformed report in it is counted and skipped, not the batch.
TEST_F(MonitorHubTest, ABatchIsTakenInReportByReport) {
  Inbox a;
  auto sa = hub_.OpenStream("peer-a", a.Writer());
  hub_.Receive(*sa, Hello("node-a"));
  const int64_t t = clock_.NowMillis();
  v1::AgentMessage malformed = Step("", "node-a", 0.1, t);  // no worker_id
  EXPECT_TRUE(
      hub_.Receive(*sa, Batch({Step("w-0", "node-a", 0.1, t), malformed,
                               Step("w-1", "node-a", 0.1, t), Step("w-2", "node-b", 0.3, t)})));
  clock_.Advance(kCloseAfterMs);
  hub_.Tick();
  absl::StatusOr<v1::GetJobHealthResponse> health = hub_.Health("", kJob);
  ASSERT_TRUE(health.ok()) << health.status();
  ASSERT_EQ(health->workers_size(), 3);
  EXPECT_EQ(health->workers(2).worker_id(), "w-2");
  EXPECT_EQ(health->workers(2).class_(), v1::TRANSIENT);
  const std::string text = prometheus::TextSerializer().Serialize(hub_.Collector()->Collect());
  for (const char* line : {"antdt_monitor_reports_total{kind=\"step\"} 3",
                           "antdt_monitor_reports_dropped_total{reason=\"malformed\"} 1"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
  }
}

// On a certified stream each report of a batch is checked on its own: another
// node's is dropped and counted, its node's others are taken in; a batch
// before the hello is all dropped, every report counted.
TEST_F(MonitorHubTest, ACertifiedStreamChecksEachReportOfABatch) {
  Inbox own;
  auto sa = hub_.OpenStream("peer-a", own.Writer(), std::vector<std::string>{"system:node:node-a"});
  const int64_t t = clock_.NowMillis();
  EXPECT_TRUE(hub_.Receive(*sa, Batch({Step("w-0", "node-a", 0.1, t)})));  // before the hello
  EXPECT_TRUE(hub_.Receive(*sa, Hello("node-a")));
  EXPECT_TRUE(hub_.Receive(
      *sa, Batch({Step("w-0", "node-a", 0.1, t), Step("w-2", "node-b", 9.0, t),  // another node's
                  Step("w-1", "node-a", 0.1, t)})));
  const std::string text = prometheus::TextSerializer().Serialize(hub_.Collector()->Collect());
  for (const char* line : {"antdt_monitor_reports_total{kind=\"step\"} 2",
                           "antdt_monitor_reports_dropped_total{reason=\"node_identity\"} 2"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin:\n" << text;
  }
}

}  // namespace
}  // namespace antdt::monitor
