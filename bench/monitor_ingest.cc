// antdt-bench-agent-monitor, section 2 (bench/agent_monitor_bench.cc says what each figure is).
#include "bench/agent_monitor_common.h"

namespace agent_monitor_bench {

// ---- 2. Monitor ingest -------------------------------------------------------

constexpr int kIngestWorkers = 256;

// Step reports of one job: 256 workers on 32 nodes, one 100 ms step each per
// round, spread over the round; worker 17 runs at 2x.
std::vector<v1::StepReport> MakeReports(int64_t n) {
  std::vector<v1::StepReport> out(static_cast<size_t>(n));
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> jitter(-0.1, 0.1);
  for (int64_t i = 0; i < n; ++i) {
    const int w = static_cast<int>(i % kIngestWorkers);
    const int64_t round = i / kIngestWorkers;
    v1::StepReport& r = out[static_cast<size_t>(i)];
    r.set_job("ctr-training");
    r.set_worker_id(absl::StrCat("worker-", w));
    r.set_role("worker");
    r.set_node(absl::StrCat("node-", w / 8));
    r.set_pid(1000 + w);
    r.set_step(round);
    r.set_samples(512);
    const double bpt = 0.1 * (w == 17 ? 2.0 : 1.0) * (1 + jitter(rng));
    r.set_bpt_seconds(bpt);
    r.set_data_wait_seconds(0.004);
    r.set_compute_seconds(bpt * 0.75);
    r.set_communication_seconds(bpt * 0.25 - 0.004);
    r.set_time_unix_ms(kT0 + round * 100 + w * 100 / kIngestWorkers);
  }
  return out;
}

IngestFigures InProcessIngest(int64_t n) {
  auto t0 = Clock::now();
  const std::vector<v1::StepReport> reports = MakeReports(n);
  std::printf(
      "\n== Monitor ingest, in process, one thread: %lld step reports of one job (%d workers, "
      "10 s windows over %.0f s; generated in %.1f s) ==\n",
      static_cast<long long>(n), kIngestWorkers,
      static_cast<double>(reports.back().time_unix_ms() - kT0) / 1000, Seconds(Clock::now() - t0));

  // Baseline: copying each report into a reused message.
  v1::StepReport scratch;
  double sink = 0;
  t0 = Clock::now();
  for (const v1::StepReport& r : reports) {
    scratch.CopyFrom(r);
    sink += scratch.bpt_seconds();
  }
  const double copy_s = Seconds(Clock::now() - t0);

  auto monitor = *antdt::monitor::Monitor::Create(antdt::monitor::MonitorConfig{});
  Clock::duration closing{};
  int64_t closed_seen = 0, health_calls = 0;
  // Closes windows at `now` and, when one closed, reads the job's health as the
  // service's tick does.
  auto close = [&](int64_t now) {
    const auto c0 = Clock::now();
    monitor.CloseWindows(now);
    if (monitor.Stats().windows_closed != closed_seen) {
      closed_seen = monitor.Stats().windows_closed;
      for (const std::string& job : monitor.Jobs()) {
        sink += static_cast<double>(monitor.Health(job, now).workers_size());
        ++health_calls;
      }
    }
    closing += Clock::now() - c0;
  };
  t0 = Clock::now();
  for (size_t i = 0; i < reports.size(); ++i) {
    monitor.Ingest(reports[i]);
    if ((i + 1) % 10'000 == 0) close(reports[i].time_unix_ms());
  }
  close(reports.back().time_unix_ms() + 20'000);  // the last windows
  const double ingest_s = Seconds(Clock::now() - t0);
  const auto& st = monitor.Stats();

  IngestFigures f;
  f.copy_per_second = static_cast<double>(n) / copy_s;
  f.ingest_per_second = static_cast<double>(n) / ingest_s;
  std::printf("%-52s %12.0f reports/s  (%.3f s)\n", "StepReport CopyFrom (baseline)",
              f.copy_per_second, copy_s);
  std::printf("%-52s %12.0f reports/s  (%.3f s, %.2f us/report)\n",
              "Monitor Ingest + CloseWindows every 10,000 + Health", f.ingest_per_second, ingest_s,
              1e6 * ingest_s / static_cast<double>(n));
  std::printf("%-52s %12.1f%%\n", "  of which CloseWindows + Health",
              100 * Seconds(closing) / ingest_s);
  std::printf("%-52s %12.2fx the copy's time\n", "ratio", copy_s > 0 ? ingest_s / copy_s : 0);
  std::printf("%-52s %12s reports/s on one core\n", "aim", ">= 20000");
  std::printf(
      "accepted %lld, late %lld, early %lld, rejected %lld; %lld windows closed, "
      "%lld Health calls (checksum %.0f)\n",
      static_cast<long long>(st.step_reports), static_cast<long long>(st.late_reports),
      static_cast<long long>(st.early_reports), static_cast<long long>(st.rejected),
      static_cast<long long>(st.windows_closed), static_cast<long long>(health_calls), sink);
  std::fflush(stdout);
  return f;
}

// 2b: reports/s through a hub's Receive without and with the credential gate,
// alternating, `rounds` times each over `n` reports (within the Monitor's open
// windows: no window closes, so every report is taken in).
void GateCost(int64_t n, int rounds) {
  std::vector<v1::StepReport> reports = MakeReports(n);
  const std::string digest = antdt::TokenDigest("bench-job-token");
  for (v1::StepReport& r : reports) r.set_credential_digest(digest);
  double seconds[2] = {0, 0};
  int64_t accepted[2] = {0, 0};
  for (int i = 0; i < 2 * rounds; ++i) {
    const int gated = i % 2;
    antdt::monitor::MonitorHub hub(
        *antdt::monitor::Monitor::Create(antdt::monitor::MonitorConfig{}),
        &antdt::RealClock::Get());
    if (gated == 1) {
      hub.SetStepGate([&digest](const v1::StepReport& step) {
        return antdt::DigestsMatch(step.credential_digest(), digest);
      });
    }
    auto stream = hub.OpenStream("bench", [](const v1::MonitorMessage&) { return true; });
    v1::AgentMessage message;
    message.mutable_hello()->set_node("node-0");
    hub.Receive(*stream, message);
    const auto t0 = Clock::now();
    for (const v1::StepReport& r : reports) {
      *message.mutable_step() = r;
      hub.Receive(*stream, message);
    }
    seconds[gated] += Seconds(Clock::now() - t0);
    hub.CloseStream(*stream);
    const std::string text = prometheus::TextSerializer().Serialize(hub.Collector()->Collect());
    const std::string key = "antdt_monitor_reports_total{kind=\"step\"} ";
    const size_t at = text.find(key);
    int64_t taken = 0;
    if (at != std::string::npos) {
      (void)absl::SimpleAtoi(text.substr(at + key.size(), text.find('\n', at) - at - key.size()),
                             &taken);
    }
    accepted[gated] += taken;
  }
  const double rate[2] = {static_cast<double>(n) * rounds / seconds[0],
                          static_cast<double>(n) * rounds / seconds[1]};
  std::printf(
      "\n== The credential gate: %d x %lld step reports through MonitorHub::Receive, one thread, "
      "alternating ==\n",
      rounds, static_cast<long long>(n));
  std::printf("%-52s %12.0f reports/s  (%lld taken in)\n", "no gate (baseline)", rate[0],
              static_cast<long long>(accepted[0]));
  std::printf("%-52s %12.0f reports/s  (%lld taken in)\n", "credential gate (digest compared)",
              rate[1], static_cast<long long>(accepted[1]));
  std::printf("%-52s %12.2f\n", "rate ratio", rate[0] > 0 ? rate[1] / rate[0] : 0);
  std::fflush(stdout);
}

// Certificates for the TLS figures (scripts/make-certs.sh, next to the build,
// with a node certificate for bench-node); "" when the script is not there.
std::string MakeCerts() {
  const std::string script = g_bin_dir + "/../../scripts/make-certs.sh";
  const std::string dir = g_work_dir + "/tls";
  if (!std::filesystem::exists(script) ||
      std::system((script + " " + dir + " bench-node >/dev/null").c_str()) != 0) {
    return "";
  }
  return dir;
}

// How the stream's reports are sent.
enum class Sender {
  kSingle,  // one report per stream message: what the agent sent before batching
  kBatch,   // StepBatch messages of kBatchReports, written by the bench itself
  kAgent,   // the agent's own sender: an Outbox fed one report at a time, drained
            // by a MonitorLink (batches of up to Outbox::Batching::max_reports)
};
constexpr int kBatchReports = 512;
constexpr char kTaskset[] = "/usr/bin/taskset";  // util-linux

struct StreamFigures {
  double accepted_per_second = 0;
  int64_t sent = 0;
  double accepted = 0;
  double monitor_cpu = 0;  // the Monitor's CPU seconds over the measurement / its wall time
  int64_t dropped = 0;     // by the agent's Outbox (kAgent)
  std::string status = "OK";
};

// Pins the calling thread, and the threads it starts from now on, to `cpu`
// (no-op with fewer CPUs).
void PinTo(int cpu) {
  if (static_cast<int>(std::thread::hardware_concurrency()) <= cpu) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof(set), &set);
}

// The i-th report of the stream's 256 workers, stamped now.
void FillReport(int64_t i, v1::StepReport& r) {
  const int w = static_cast<int>(i % kIngestWorkers);
  r.set_job("ctr-training");
  r.set_worker_id(absl::StrCat("worker-", w));
  r.set_role("worker");
  r.set_node("bench-node");
  r.set_pid(1000 + w);
  r.set_step(i / kIngestWorkers);
  r.set_samples(512);
  r.set_bpt_seconds(0.1 * (1 + 0.01 * (w % 10)));
  r.set_data_wait_seconds(0.004);
  r.set_compute_seconds(0.075);
  r.set_communication_seconds(0.021);
  r.set_time_unix_ms(NowUnixMs());
}

// Streams step reports to a real `antdt monitor` (pinned to CPU 0 with
// taskset, so it has one core; the bench's own threads run on CPU 1) over one
// Monitor stream, as an agent does, for `seconds` after a 0.5 s warm-up; the
// rate is the Monitor's own count of step reports taken in over that time.
// With `tls_dir` over mutual TLS (the Monitor's server certificate, the client
// bench-node's).
std::optional<StreamFigures> StreamIngest(double seconds, Sender sender,
                                          const std::string& tls_dir) {
  std::map<std::string, std::string> env;
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  if (!tls_dir.empty()) {
    env = {{"ANTDT_TLS_CERT", tls_dir + "/server.crt"},
           {"ANTDT_TLS_KEY", tls_dir + "/server.key"},
           {"ANTDT_TLS_CA", tls_dir + "/ca.crt"}};
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = *antdt::ReadFile(tls_dir + "/ca.crt");
    o.pem_cert_chain = *antdt::ReadFile(tls_dir + "/node-bench-node.crt");
    o.pem_private_key = *antdt::ReadFile(tls_dir + "/node-bench-node.key");
    credentials = grpc::SslCredentials(o);
    args.SetSslTargetNameOverride("antdt.internal");
  }
  const std::string name = tls_dir.empty() ? "ingest-monitor" : "ingest-monitor-tls";
  auto server = StartServer(
      name, {kTaskset, "-c", "0", g_bin_dir + "/antdt", "monitor", "--listen", "127.0.0.1:0"}, env);
  if (!server) return std::nullopt;
  const std::string ca = tls_dir.empty() ? "" : tls_dir + "/ca.crt";
  StreamFigures f;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> sent{0};
  std::thread client;
  // The agent's sender, for kAgent.
  prometheus::Registry registry;
  antdt::agent::Outbox outbox(10'000);
  antdt::agent::DirectiveTable directives;
  antdt::agent::NodeView view;
  std::unique_ptr<antdt::agent::MonitorLink> link;
  // The bench's own stream, for kSingle and kBatch.
  auto stub = v1::Monitor::NewStub(grpc::CreateCustomChannel(server->address, credentials, args));
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::MonitorMessage>> stream;
  std::thread reader;
  if (sender == Sender::kAgent) {
    antdt::agent::MonitorLinkOptions options;
    options.address = server->address;
    options.node = "bench-node";
    link =
        std::make_unique<antdt::agent::MonitorLink>(options, &outbox, &directives, &view, registry);
    link->Start();
    if (!antdt::WaitFor([&] { return link->connected(); }, std::chrono::seconds(15))) {
      std::fprintf(stderr, "the agent's link never connected; see %s\n", server->log.c_str());
      return std::nullopt;
    }
    // One report per message, as AgentServiceImpl::ReportStep queues a call's
    // report; held back while 8,000 wait, so the Outbox (10,000) drops none.
    client = std::thread([&] {
      int64_t i = 0;
      while (!stop) {
        if (outbox.size() >= 8'000) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          continue;
        }
        v1::AgentMessage m;
        FillReport(i++, *m.mutable_step());
        outbox.Push(std::move(m));
        sent.fetch_add(1, std::memory_order_relaxed);
      }
    });
  } else {
    stream = stub->Stream(&ctx);
    stream->WaitForInitialMetadata();
    v1::AgentMessage hello;
    hello.mutable_hello()->set_node("bench-node");
    stream->Write(hello);
    reader = std::thread([&] {
      v1::MonitorMessage m;
      while (stream->Read(&m)) {
      }
    });
    client = std::thread([&] {
      const int per_message = sender == Sender::kSingle ? 1 : kBatchReports;
      v1::AgentMessage m;
      int64_t i = 0;
      while (!stop) {
        if (sender == Sender::kSingle) {
          FillReport(i++, *m.mutable_step());
        } else {
          auto* steps = m.mutable_steps()->mutable_steps();
          while (steps->size() < per_message) steps->Add();
          for (v1::StepReport& r : *steps) FillReport(i++, r);
        }
        if (!stream->Write(m)) break;
        sent.fetch_add(per_message, std::memory_order_relaxed);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // warm-up
  const double before = Metric(server->metrics, kStepReports, ca).value_or(0);
  const double cpu_before = CpuSeconds(server->proc->pid()).value_or(0);
  const int64_t sent_before = sent;
  const auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const double after = Metric(server->metrics, kStepReports, ca).value_or(0);
  const double cpu_after = CpuSeconds(server->proc->pid()).value_or(0);
  const double elapsed = Seconds(Clock::now() - start);
  f.sent = sent - sent_before;
  stop = true;
  client.join();
  if (stream) {
    stream->WritesDone();
    reader.join();  // the Monitor ends the stream once it has read everything
    const grpc::Status status = stream->Finish();
    if (!status.ok()) f.status = status.error_message();
  }
  link.reset();
  f.dropped = outbox.dropped_step_reports();
  f.accepted = after - before;
  f.accepted_per_second = f.accepted / elapsed;
  f.monitor_cpu = (cpu_after - cpu_before) / elapsed;
  return f;
}

// The stream's ingest: the agent's batched sender beside single-report
// messages (the path before batching) in the same run, plaintext and over
// mutual TLS, beside in-process.
bool GrpcIngest(double seconds, const IngestFigures& in_process) {
  PinTo(1);  // the bench's threads from here on; the Monitor has CPU 0
  const std::optional<StreamFigures> single = StreamIngest(seconds, Sender::kSingle, "");
  const std::optional<StreamFigures> agent = StreamIngest(seconds, Sender::kAgent, "");
  const std::optional<StreamFigures> batch = StreamIngest(seconds, Sender::kBatch, "");
  if (!single || !agent || !batch) return false;
  const std::string tls_dir = MakeCerts();
  std::optional<StreamFigures> tls_single, tls_batch;
  if (!tls_dir.empty()) {
    tls_single = StreamIngest(seconds, Sender::kSingle, tls_dir);
    tls_batch = StreamIngest(seconds, Sender::kBatch, tls_dir);
  }
  std::printf(
      "\n== Monitor ingest through gRPC: one agent stream to antdt monitor on one core (taskset "
      "-c 0; the sender on CPU 1 of %u), %.0f s each ==\n",
      std::thread::hardware_concurrency(), seconds);
  std::printf("%-52s %12.0f reports/s\n", "in process, above (reference)",
              in_process.ingest_per_second);
  auto row = [](const char* what, const StreamFigures& f) {
    std::printf(
        "%-52s %12.0f reports/s  (Monitor CPU %.0f%% of its core; %lld sent, %.0f taken in, "
        "%lld dropped, stream %s)\n",
        what, f.accepted_per_second, 100 * f.monitor_cpu, static_cast<long long>(f.sent),
        f.accepted, static_cast<long long>(f.dropped), f.status.c_str());
  };
  row("one report per message (before batching; baseline)", *single);
  row("the agent's sender: Outbox + MonitorLink, batched", *agent);
  row(absl::StrCat("StepBatch of ", kBatchReports, " per message, from the bench").c_str(), *batch);
  std::printf("%-52s %12.2fx\n", "ratio agent's batched / one per message",
              agent->accepted_per_second / single->accepted_per_second);
  std::printf("%-52s %12s reports/s on one core\n", "aim", ">= 500000");
  if (tls_single && tls_batch) {
    row("mutual TLS, one report per message", *tls_single);
    row(absl::StrCat("mutual TLS, StepBatch of ", kBatchReports).c_str(), *tls_batch);
    std::printf("%-52s %12.2fx\n", "ratio TLS batched / plaintext batched",
                tls_batch->accepted_per_second / batch->accepted_per_second);
  } else {
    std::printf("(no TLS figure: scripts/make-certs.sh not found next to the build)\n");
  }
  std::fflush(stdout);
  return true;
}

}  // namespace agent_monitor_bench
