#include "common/tls_front.h"

#include <array>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/asio_listen.h"
#include "common/tls.h"

namespace antdt {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(2);

// One client connection: TLS on the outside, plaintext to the upstream.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, asio::ssl::context& ssl, tcp::endpoint upstream)
      : client_(std::move(socket), ssl),
        upstream_(client_.get_executor()),
        upstream_endpoint_(upstream),
        timer_(client_.get_executor()) {}

  void Start() {
    auto self = shared_from_this();
    timer_.expires_after(kHandshakeTimeout);
    timer_.async_wait([self](boost::system::error_code ec) {
      if (!ec) self->Close();  // a slow or silent client
    });
    client_.async_handshake(asio::ssl::stream_base::server, [self](boost::system::error_code ec) {
      self->timer_.cancel();
      if (ec) return self->Close();
      self->Connect();
    });
  }

 private:
  void Connect() {
    auto self = shared_from_this();
    upstream_.async_connect(upstream_endpoint_, [self](boost::system::error_code ec) {
      if (ec) return self->Close();
      self->ClientToUpstream();
      self->UpstreamToClient();
    });
  }

  void ClientToUpstream() {
    auto self = shared_from_this();
    client_.async_read_some(asio::buffer(in_), [self](boost::system::error_code ec, size_t n) {
      if (ec) return self->Close();
      asio::async_write(self->upstream_, asio::buffer(self->in_, n),
                        [self](boost::system::error_code ec2, size_t) {
                          if (ec2) return self->Close();
                          self->ClientToUpstream();
                        });
    });
  }

  void UpstreamToClient() {
    auto self = shared_from_this();
    upstream_.async_read_some(asio::buffer(out_), [self](boost::system::error_code ec, size_t n) {
      if (ec) {
        // The upstream answered and closed (HTTP/1.0, or its keep-alive
        // ended): end the TLS session cleanly.
        return self->client_.async_shutdown([self](boost::system::error_code) { self->Close(); });
      }
      asio::async_write(self->client_, asio::buffer(self->out_, n),
                        [self](boost::system::error_code ec2, size_t) {
                          if (ec2) return self->Close();
                          self->UpstreamToClient();
                        });
    });
  }

  void Close() {
    boost::system::error_code ignored;
    timer_.cancel();
    client_.lowest_layer().close(ignored);
    upstream_.close(ignored);
  }

  asio::ssl::stream<tcp::socket> client_;
  tcp::socket upstream_;
  tcp::endpoint upstream_endpoint_;
  asio::steady_timer timer_;
  std::array<char, 16384> in_, out_;
};

}  // namespace

struct TlsFront::Impl {
  asio::io_context io;
  asio::ssl::context ssl{asio::ssl::context::tls_server};
  tcp::acceptor acceptor{io};
  tcp::endpoint upstream;
  std::thread thread;

  void Accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;  // stopping
      if (!ec) std::make_shared<Session>(std::move(socket), ssl, upstream)->Start();
      Accept();
    });
  }
};

absl::StatusOr<std::unique_ptr<TlsFront>> TlsFront::Start(const std::string& listen,
                                                          int upstream_port,
                                                          const std::string& field) {
  auto impl = std::make_unique<Impl>();
  const TlsFiles& tls = ProcessTls();
  boost::system::error_code ec;
  impl->ssl.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                        asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                        asio::ssl::context::no_tlsv1_1);
  impl->ssl.use_certificate_chain_file(tls.cert, ec);
  if (!ec) impl->ssl.use_private_key_file(tls.key, asio::ssl::context::pem, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": cannot serve TLS with tls-cert/tls-key: ", ec.message()));
  }
  if (absl::Status s = ListenOn(impl->acceptor, listen, field); !s.ok()) return s;
  impl->upstream =
      tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(upstream_port));
  impl->Accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<TlsFront>(new TlsFront(std::move(impl)));
}

TlsFront::TlsFront(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TlsFront::~TlsFront() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int TlsFront::port() const { return impl_->acceptor.local_endpoint().port(); }

}  // namespace antdt
