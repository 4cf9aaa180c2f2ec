// A TLS front for a plaintext HTTP endpoint: accepts TLS connections (the
// process's certificate, common/tls.h) on one address and relays each one's
// bytes to an upstream on loopback. The metrics endpoints use it: CivetWeb,
// prometheus-cpp's server, is built on Debian 12 for OpenSSL 1.1's API, and
// its own HTTPS calls a function OpenSSL 3 no longer has.
//
// A connection whose handshake has not finished in 2 s is dropped, as
// CivetWeb drops a slow request. Thread-safety: Start and the destructor
// from one thread; one thread of its own relays.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace antdt {

class TlsFront {
 public:
  // Listens on `listen` (HOST:PORT, port 0 picks one) and relays to
  // 127.0.0.1:`upstream_port`. InvalidArgument naming `field` when it cannot
  // listen or the certificate cannot be loaded.
  static absl::StatusOr<std::unique_ptr<TlsFront>> Start(const std::string& listen,
                                                         int upstream_port,
                                                         const std::string& field);
  ~TlsFront();  // stops accepting, closes every connection, joins
  TlsFront(const TlsFront&) = delete;
  TlsFront& operator=(const TlsFront&) = delete;

  int port() const;

  struct Impl;

 private:
  explicit TlsFront(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace antdt
