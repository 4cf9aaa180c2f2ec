// `Api` over HTTP(S) with cpprestsdk: the client the operator uses against a
// real API server (or testing/kube-emulator). The only file of the operator that
// includes cpprest.
//
// Thread-safety: every method may be called from any number of threads at
// once. Watch blocks its calling thread (one std::thread per watch); nothing
// blocks inside cpprestsdk's thread pool, which is left as the library
// configures it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/kubernetes/client/api.h"
#include "backends/kubernetes/client/config.h"

namespace antdt::kube {

struct ClientOptions {
  // Client-side token bucket over all requests (watches included); qps <= 0
  // disables it.
  double qps = 20;
  int burst = 30;
  std::string user_agent = "antdt-operator";
  // A 429 is retried after Retry-After (or details.retryAfterSeconds, else
  // 1 s) this many times, then returned.
  int max_retries_429 = 5;
  // Inactivity timeout of non-watch requests.
  int request_timeout_seconds = 30;
  // Called after every HTTP attempt (retries included). verb: get, list,
  // watch, create, update, patch, delete; resource: the plural; code: the
  // HTTP code, or 0 for a transport error; seconds: the attempt's latency
  // (for a watch, until the response headers). Called from the requesting
  // thread; must be thread-safe.
  std::function<void(const std::string& verb, const std::string& resource, int code,
                     double seconds)>
      on_request;
};

class Client : public Api {
 public:
  // Checks the config (server URL, PEM material) and builds the client; no
  // request is made.
  static absl::StatusOr<std::unique_ptr<Client>> Create(const ClusterConfig& config,
                                                        const ClientOptions& options);
  ~Client() override;

  absl::StatusOr<Json> Get(const ResourceRef& r, const std::string& ns,
                           const std::string& name) override;
  absl::StatusOr<Json> List(const ResourceRef& r, const std::string& ns,
                            const ListOptions& options) override;
  absl::StatusOr<Json> Create(const ResourceRef& r, const std::string& ns,
                              const Json& object) override;
  absl::StatusOr<Json> Update(const ResourceRef& r, const std::string& ns,
                              const Json& object) override;
  absl::StatusOr<Json> UpdateStatus(const ResourceRef& r, const std::string& ns,
                                    const Json& object) override;
  absl::StatusOr<Json> Patch(const ResourceRef& r, const std::string& ns, const std::string& name,
                             const Json& patch, PatchType type = PatchType::kMerge,
                             const std::string& subresource = "") override;
  absl::Status Delete(const ResourceRef& r, const std::string& ns, const std::string& name,
                      const DeleteOptions& options = {}) override;
  absl::Status Watch(const ResourceRef& r, const std::string& ns, const WatchOptions& options,
                     const std::function<bool(const WatchEvent&)>& on_event,
                     Cancel* cancel) override;
  // Its Trigger() aborts a blocked watch read at once.
  std::unique_ptr<Cancel> NewCancel() override;

  // The namespace of the config (for callers that need a default).
  const std::string& default_namespace() const;

  class Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace antdt::kube
