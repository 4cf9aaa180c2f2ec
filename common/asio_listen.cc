#include "common/asio_listen.h"

#include <boost/asio.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace antdt {

absl::Status ListenOn(boost::asio::ip::tcp::acceptor& acceptor, const std::string& listen,
                      const std::string& field) {
  namespace asio = boost::asio;
  using asio::ip::tcp;
  const size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
  if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  uint32_t port = 0;
  if (ec || colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": not HOST:PORT (an IP address and a port): ", listen));
  }
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": cannot listen on ", listen, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace antdt
