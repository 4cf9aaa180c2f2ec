// An in-process emulation of the Kubernetes API server, faithful enough for
// kubectl, client-go-style informers (the AntDT operator) and the Python
// client: discovery, built-in kinds as schemaless JSON stores, CRDs and their
// custom resources (validated through the schema library), resourceVersion
// and watch semantics, finalizers, owner-reference GC and a test-only control
// endpoint under /emulator/v1/. The HTTP transport lives in http_server.h.
//
// Thread-safety: Handle() may be called from any number of threads at once
// (one per connection); a watch blocks its caller until the stream ends.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace antdt::kubeemu {

struct HttpRequest {
  std::string method;
  std::string path;                           // without the query
  std::string query;                          // raw, without '?'
  std::map<std::string, std::string> params;  // decoded query parameters
  std::string content_type;
  std::string accept;
  std::string user_agent;
  std::string authorization;
  std::string body;
};

struct HttpResponse {
  int code = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// The connection a request arrived on. A request is answered once with Send(),
// or streamed: StartStream(), WriteChunk()..., then EndStream() (clean end,
// terminating chunk) or Abort() (connection dropped mid-stream).
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual void Send(const HttpResponse& response) = 0;
  virtual bool StartStream(const std::string& content_type) = 0;  // 200, chunked
  virtual bool WriteChunk(const std::string& data) = 0;           // false: peer gone
  virtual void EndStream() = 0;
  virtual void Abort() = 0;
  virtual bool PeerClosed() = 0;
};

struct EmulatorOptions {
  int64_t bookmark_interval_ms = 1000;
  int64_t history = 1000;  // watch events retained for replay
  std::string token;       // required bearer token ("" = none) ...
  std::string token_file;  // ... or read from this file on every request
  // Authorization mode RBAC: requests are allowed by Roles, ClusterRoles and
  // their bindings (rbac.h); `token` (or `token_file`) is then the admin's
  // (group system:masters), ServiceAccounts get theirs from the TokenRequest
  // API (POST .../serviceaccounts/NAME/token), and a request without a token
  // is system:anonymous.
  bool rbac = false;
  bool gc = true;  // owner-reference garbage collection
  // Built-in workload controllers: Deployments -> ReplicaSets -> Pods, and a
  // DaemonSet's pod on each node that fits it (workloads.h).
  bool controllers = true;
  bool strict_namespaces = false;
  int64_t gc_period_ms = 200;
  // pods/log (`kubectl logs`): the container's output as the test kubelet
  // keeps it, <pod_logs_dir>/<namespace>_<name>_<uid>/log. "": not served.
  std::string pod_logs_dir;
};

class Emulator {
 public:
  explicit Emulator(EmulatorOptions options);
  ~Emulator();
  Emulator(const Emulator&) = delete;
  Emulator& operator=(const Emulator&) = delete;

  void Handle(const HttpRequest& request, ResponseWriter& writer);
  // Ends every open watch (terminating chunk) and stops the GC thread.
  void Shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Decodes %XX (and '+' as a space when `plus_is_space`).
std::string UrlDecode(const std::string& text, bool plus_is_space);
std::map<std::string, std::string> ParseQuery(const std::string& query);

}  // namespace antdt::kubeemu
