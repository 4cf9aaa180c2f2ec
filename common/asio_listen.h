// Opens a Boost.Asio acceptor on "HOST:PORT" (or "[V6]:PORT"; port 0 picks
// one): the one parser and binder of the HTTP endpoints' addresses
// (common/metrics_server.h, common/tls_front.h).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <string>

#include "absl/status/status.h"

namespace antdt {

// InvalidArgument naming `field` when `listen` is not an IP address and a
// port, or cannot be bound.
absl::Status ListenOn(boost::asio::ip::tcp::acceptor& acceptor, const std::string& listen,
                      const std::string& field);

}  // namespace antdt
