#include "common/serve.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/tls.h"

namespace antdt {

absl::StatusOr<std::unique_ptr<Serving>> Serving::Start(const ServeOptions& options) {
  std::unique_ptr<Serving> s(new Serving());
  grpc::EnableDefaultHealthCheckService(true);
  // Reflection only when asked for (--grpc-reflection): it lists every
  // service and message to whoever can connect.
  if (GrpcReflectionRequested()) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, ServerCredentials(), &port);
  if (!options.unix_socket.empty()) {
    std::error_code ec;
    std::filesystem::remove(options.unix_socket, ec);
    // Node-local, guarded by the filesystem: plaintext (common/tls.h).
    builder.AddListeningPort("unix:" + options.unix_socket, grpc::InsecureServerCredentials());
  }
  for (grpc::Service* service : options.services) builder.RegisterService(service);
  using Option = grpc::ServerBuilder::SyncServerOption;
  if (options.min_pollers > 0)
    builder.SetSyncServerOption(Option::MIN_POLLERS, options.min_pollers);
  if (options.max_pollers > 0)
    builder.SetSyncServerOption(Option::MAX_POLLERS, options.max_pollers);
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen: cannot listen on ", options.listen,
                     options.unix_socket.empty() ? "" : " or socket " + options.unix_socket));
  }
  s->address_ = BoundAddress(options.listen, port);
  if (!options.metrics_listen.empty()) {
    auto registry = options.registry ? options.registry : std::make_shared<prometheus::Registry>();
    auto started = StartMetrics(options.metrics_listen, registry);
    if (!started.ok()) {
      s->Shutdown(std::chrono::milliseconds(0));
      return started.status();
    }
    s->metrics_ = std::move(*started);
  }
  return s;
}

Serving::~Serving() { Shutdown(std::chrono::milliseconds(0)); }

absl::Status Serving::WriteReady(const std::string& path,
                                 const std::vector<std::pair<std::string, std::string>>& fields) {
  if (path.empty()) return absl::OkStatus();
  std::string content = address_ + "\n";
  if (!metrics_.address.empty()) absl::StrAppend(&content, "metrics=", metrics_.address, "\n");
  for (const auto& [key, value] : fields) absl::StrAppend(&content, key, "=", value, "\n");
  return WriteFileAtomically(path, content);
}

int Serving::WaitForSignal() { return WaitForTerminationSignal(); }

void Serving::SetServingStatus(const std::string& service, bool serving) {
  if (server_ && server_->GetHealthCheckService() != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(service, serving);
  }
}

void Serving::Shutdown(std::chrono::milliseconds grace) {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + grace);
    server_->Wait();
    server_.reset();
  }
  metrics_.tls.reset();
  metrics_.exposer.reset();
}

}  // namespace antdt
