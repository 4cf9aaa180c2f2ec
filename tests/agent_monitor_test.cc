// Real agent processes and a Monitor on 127.0.0.1, workers reporting through
// the SDK's StepReporter; one worker slows down and must be named PERSISTENT.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>

#include "antdt/v1/monitor.grpc.pb.h"
#include "common/testing/testing.h"

namespace antdt {
namespace {

using antdt::testing::BinPath;
using antdt::testing::HttpGet;
using antdt::testing::Process;
using antdt::testing::TempDir;
using antdt::testing::WaitFor;

struct Server {
  std::unique_ptr<Process> proc;
  std::string address;
  std::string metrics;
};

Server StartServer(const TempDir& dir, const std::string& name, std::vector<std::string> argv) {
  const std::string ready = dir.File(name + ".ready");
  argv.insert(argv.end(), {"--ready-file", ready, "--metrics-listen", "127.0.0.1:0"});
  Server s;
  s.proc = std::make_unique<Process>(argv, dir.File(name + ".log"));
  auto address = antdt::testing::WaitForReadyFile(ready, std::chrono::seconds(30));
  EXPECT_TRUE(address) << name << " not ready";
  s.address = address.value_or("");
  s.metrics = antdt::testing::ReadyFileField(ready, "metrics").value_or("");
  return s;
}

Server StartMonitor(const TempDir& dir, const std::string& listen = "127.0.0.1:0") {
  {
    std::ofstream cfg(dir.File("monitor.yaml"));
    // Lateness covers the SDK's one-second batches of step reports.
    cfg << "window: 1s\nallowed_lateness: 1500ms\npersistent_windows: 3\nwarmup_windows: 2\n";
  }
  return StartServer(dir, "monitor",
                     {BinPath("antdt"), "monitor", "--listen", listen, "--config",
                      dir.File("monitor.yaml"), "--tick", "100ms"});
}

Server StartAgent(const TempDir& dir, const std::string& node, const std::string& monitor,
                  std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {
      BinPath("antdt-agent"),   "--node",    node,    "--listen",   "127.0.0.1:0", "--socket",
      dir.File(node + ".sock"), "--monitor", monitor, "--interval", "200ms"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return StartServer(dir, node, argv);
}

std::unique_ptr<Process> StartWorker(const TempDir& dir, const std::string& agent,
                                     const std::string& id, double slow_factor = 1.0,
                                     double slow_after = 0) {
  return std::make_unique<Process>(
      std::vector<std::string>{BinPath("antdt-step-worker"), "--agent", agent, "--job", "j",
                               "--worker-id", id, "--bpt", "0.04", "--jitter", "0.1",
                               "--slow-factor", std::to_string(slow_factor), "--slow-after",
                               std::to_string(slow_after), "--seed",
                               std::to_string(std::hash<std::string>()(id) % 1000)},
      dir.File(id + ".log"));
}

std::optional<double> MetricValue(const std::string& text, const std::string& series) {
  // At the start of a line: "# HELP name ..." must not match.
  size_t pos = text.rfind("\n" + series + " ");
  if (pos == std::string::npos) return std::nullopt;
  return std::stod(text.substr(pos + series.size() + 2));
}

TEST(AgentMonitor, NamesThePersistentStragglerAndTheAgentExportsItsScore) {
  TempDir dir;
  Server monitor = StartMonitor(dir);
  Server a = StartAgent(dir, "node-a", monitor.address);
  Server b = StartAgent(dir, "node-b", monitor.address);
  std::vector<std::unique_ptr<Process>> workers;
  workers.push_back(StartWorker(dir, "unix:" + dir.File("node-a.sock"), "w0"));
  workers.push_back(StartWorker(dir, a.address, "w1"));
  workers.push_back(StartWorker(dir, a.address, "w2"));
  workers.push_back(StartWorker(dir, "unix:" + dir.File("node-b.sock"), "w3"));
  workers.push_back(StartWorker(dir, b.address, "w4", /*slow_factor=*/2.5, /*slow_after=*/4.0));
  workers.push_back(StartWorker(dir, b.address, "w5"));

  auto stub = v1::Monitor::NewStub(
      grpc::CreateChannel(monitor.address, grpc::InsecureChannelCredentials()));
  std::map<std::string, int> worst;  // highest class number seen per worker
  v1::WorkerHealth straggler;
  bool found = WaitFor(
      [&] {
        grpc::ClientContext ctx;
        v1::GetJobHealthRequest req;
        req.set_job("j");
        v1::GetJobHealthResponse resp;
        if (!stub->GetJobHealth(&ctx, req, &resp).ok()) return false;
        for (const auto& w : resp.workers()) {
          if (w.class_() == v1::TRANSIENT || w.class_() == v1::PERSISTENT ||
              w.class_() == v1::DETERMINISTIC) {
            worst[w.worker_id()] = std::max(worst[w.worker_id()], static_cast<int>(w.class_()));
          }
          if (w.worker_id() == "w4" && w.class_() == v1::PERSISTENT) {
            straggler = w;
            return true;
          }
        }
        return false;
      },
      std::chrono::seconds(60));
  ASSERT_TRUE(found) << "w4 never became PERSISTENT";
  EXPECT_EQ(straggler.node(), "node-b");
  EXPECT_GE(straggler.score(), 1.3);
  // Named within the window budget: PERSISTENT on its K-th slow window.
  EXPECT_EQ(straggler.windows_slow(), 3);
  EXPECT_NE(straggler.cause(), v1::CAUSE_UNSPECIFIED);
  for (const auto& [worker, cls] : worst) {
    if (worker != "w4") ADD_FAILURE() << worker << " was flagged with class " << cls;
  }

  // The agent of node-b exports w4's score and class once the Monitor sent them.
  const std::string series =
      "antdt_worker_straggler_class{job=\"j\",worker=\"w4\",role=\"worker\"}";
  std::string text;
  ASSERT_TRUE(WaitFor(
      [&] {
        text = HttpGet(b.metrics, "/metrics").value_or("");
        return MetricValue(text, series).value_or(0) == 5;
      },
      std::chrono::seconds(10)))
      << text;
  auto score =
      MetricValue(text, "antdt_worker_straggler_score{job=\"j\",worker=\"w4\",role=\"worker\"}");
  ASSERT_TRUE(score);
  EXPECT_GE(*score, 1.3);
  EXPECT_NE(text.find("antdt_worker_step_seconds_bucket{job=\"j\",role=\"worker\",worker=\"w4\""),
            std::string::npos);
  EXPECT_NE(text.find("antdt_node_cpu_utilization_ratio{node=\"node-b\"}"), std::string::npos);
  EXPECT_EQ(MetricValue(text, "antdt_agent_monitor_connected"), 1.0);
  // The Monitor's own metrics say the same.
  std::string mtext = HttpGet(monitor.metrics, "/metrics").value_or("");
  EXPECT_NE(mtext.find("antdt_monitor_straggler_class{job=\"j\",worker=\"w4\",role=\"worker\",node="
                       "\"node-b\"} 5"),
            std::string::npos)
      << mtext;

  if (std::system("command -v promtool >/dev/null 2>&1") == 0) {
    for (const std::string& body : {text, mtext}) {
      {
        std::ofstream out(dir.File("m.txt"));
        out << body;
      }
      EXPECT_EQ(std::system(("promtool check metrics < " + dir.File("m.txt") + " > " +
                             dir.File("promtool.txt") + " 2>&1")
                                .c_str()),
                0);
      std::ifstream in(dir.File("promtool.txt"));
      std::string report((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_EQ(report, "");
    }
  }

  grpc::ClientContext ctx;
  v1::GetJobHealthRequest req;
  req.set_job("no-such-job");
  v1::GetJobHealthResponse resp;
  EXPECT_EQ(stub->GetJobHealth(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

// A loopback port nobody listens on, held (bound, not listening) until
// released, so no other process of the test is given it meanwhile.
int HoldPort(int* fd_out) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // not inherited by children
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *fd_out = fd;
  return ntohs(addr.sin_port);
}

TEST(AgentMonitor, BuffersWhileTheMonitorIsAwayCountsDropsAndReconnects) {
  TempDir dir;
  int held = -1;
  const std::string monitor_address = "127.0.0.1:" + std::to_string(HoldPort(&held));
  Server agent = StartAgent(dir, "node-a", monitor_address, {"--buffer", "20"});
  auto worker = StartWorker(dir, agent.address, "w0");
  std::string text;
  ASSERT_TRUE(WaitFor(
      [&] {
        text = HttpGet(agent.metrics, "/metrics").value_or("");
        return MetricValue(text, "antdt_agent_dropped_messages_total{kind=\"step_report\"}")
                   .value_or(0) > 0;
      },
      std::chrono::seconds(20)))
      << text;
  EXPECT_EQ(MetricValue(text, "antdt_agent_monitor_connected"), 0.0);
  close(held);
  Server monitor = StartMonitor(dir, monitor_address);
  ASSERT_TRUE(WaitFor(
      [&] {
        text = HttpGet(agent.metrics, "/metrics").value_or("");
        return MetricValue(text, "antdt_agent_monitor_connected") == 1.0;
      },
      std::chrono::seconds(20)))
      << text;
  // The buffered reports reached the Monitor, and it knows what was dropped.
  std::string mtext;
  ASSERT_TRUE(WaitFor(
      [&] {
        mtext = HttpGet(monitor.metrics, "/metrics").value_or("");
        return MetricValue(mtext, "antdt_monitor_reports_total{kind=\"step\"}").value_or(0) >= 20 &&
               MetricValue(mtext,
                           "antdt_monitor_agent_dropped_messages_total{node=\"node-a\",kind=\"step_"
                           "report\"}")
                       .value_or(0) > 0;
      },
      std::chrono::seconds(20)))
      << mtext;
  agent.proc->Signal(SIGTERM);
  auto status = agent.proc->Wait(std::chrono::seconds(10));
  ASSERT_TRUE(status);
  EXPECT_EQ(WEXITSTATUS(*status), 0);
}

// After the sampler thread started: it is stopped, not left to std::terminate.
TEST(AgentFlags, UnwritableReadyFileExitsWithTheReason) {
  TempDir dir;
  Process agent({BinPath("antdt-agent"), "--listen", "127.0.0.1:0", "--ready-file",
                 dir.File("missing/ready")},
                dir.File("agent.log"));
  auto status = agent.Wait(std::chrono::seconds(10));
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << "status " << *status;
  std::ifstream in(dir.File("agent.log"));
  std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("cannot write"), std::string::npos) << log;
}

}  // namespace
}  // namespace antdt
