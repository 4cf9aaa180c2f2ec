// antdt-kube-emulator: a Kubernetes API server emulator for tests.
//   antdt-kube-emulator --listen 127.0.0.1:0 --ready-file /tmp/emu.ready
// See README.md for the flags, the control endpoint and the fidelity gaps.
#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "common/config.h"
#include "common/server.h"
#include "testing/kube-emulator/emulator.h"
#include "testing/kube-emulator/http_server.h"

int main(int argc, char** argv) {
  using namespace antdt::kubeemu;  // NOLINT
  auto flags =
      antdt::ParseFlags(argc, argv,
                        {"listen", "ready-file", "bookmark-interval", "history", "token",
                         "token-file", "tls-cert", "tls-key", "no-gc", "strict-namespaces",
                         "gc-period", "authorization-mode", "no-controllers", "pod-logs-dir"},
                        {"no-gc", "strict-namespaces", "no-controllers"});
  if (!flags.ok()) {
    std::fprintf(stderr, "antdt-kube-emulator: %s\n",
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  EmulatorOptions options;
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "antdt-kube-emulator: %s\n", std::string(s.message()).c_str());
    return 2;
  };
  auto interval =
      antdt::ParseDurationMs(flags->Get("bookmark-interval", "1s"), "--bookmark-interval");
  if (!interval.ok()) return fail(interval.status());
  options.bookmark_interval_ms = *interval;
  auto gc_period = antdt::ParseDurationMs(flags->Get("gc-period", "200ms"), "--gc-period");
  if (!gc_period.ok()) return fail(gc_period.status());
  options.gc_period_ms = *gc_period;
  if (!absl::SimpleAtoi(flags->Get("history", "1000"), &options.history) || options.history < 0) {
    return fail(absl::InvalidArgumentError("--history: must be a non-negative integer"));
  }
  options.token = flags->Get("token");
  options.token_file = flags->Get("token-file");
  options.gc = !flags->Has("no-gc");
  options.controllers = !flags->Has("no-controllers");
  const std::string mode = flags->Get("authorization-mode", "AlwaysAllow");
  if (mode != "AlwaysAllow" && mode != "RBAC") {
    return fail(absl::InvalidArgumentError(
        "--authorization-mode: must be AlwaysAllow or RBAC, got \"" + mode + "\""));
  }
  options.rbac = mode == "RBAC";
  options.strict_namespaces = flags->Has("strict-namespaces");
  options.pod_logs_dir = flags->Get("pod-logs-dir");
  ServerOptions server_options;
  server_options.listen = flags->Get("listen", "127.0.0.1:0");
  server_options.tls_cert = flags->Get("tls-cert");
  server_options.tls_key = flags->Get("tls-key");
  if (server_options.tls_cert.empty() != server_options.tls_key.empty()) {
    return fail(absl::InvalidArgumentError("--tls-cert and --tls-key go together"));
  }

  antdt::BlockTerminationSignals();
  Emulator emulator(options);
  auto server = HttpServer::Start(server_options, &emulator);
  if (!server.ok()) return fail(server.status());
  std::string address = (*server)->address();
  std::fprintf(stderr, "antdt-kube-emulator: serving %s on %s\n",
               server_options.tls_cert.empty() ? "http" : "https", address.c_str());
  if (flags->Has("ready-file")) {
    absl::Status s = antdt::WriteReadyFile(flags->Get("ready-file"), address, "");
    if (!s.ok()) return fail(s);
  }
  int sig = antdt::WaitForTerminationSignal();
  std::fprintf(stderr, "antdt-kube-emulator: signal %d, stopping\n", sig);
  emulator.Shutdown();
  (*server)->Stop();
  return 0;
}
