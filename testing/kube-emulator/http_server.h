// HTTP/1.1 (optionally TLS) transport for the emulator: Boost.Beast, blocking
// I/O, one thread per connection, keep-alive, chunked watch streams.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "testing/kube-emulator/emulator.h"

namespace antdt::kubeemu {

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT, port 0 picks a free one
  std::string tls_cert;                // PEM files; both empty = plain http
  std::string tls_key;
};

class HttpServer {
 public:
  // Binds and starts accepting; `emulator` must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const ServerOptions& options,
                                                           Emulator* emulator);
  virtual ~HttpServer() = default;
  virtual std::string address() const = 0;  // bound HOST:PORT
  // Stops accepting, shuts every connection down and waits (bounded) for the
  // connection threads to finish.
  virtual void Stop() = 0;
};

}  // namespace antdt::kubeemu
