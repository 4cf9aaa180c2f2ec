#include "common/metrics_server.h"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/asio_listen.h"
#include "prometheus/text_serializer.h"

namespace antdt {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

namespace {

constexpr auto kRequestTimeout = std::chrono::seconds(2);
constexpr auto kWriteTimeout = std::chrono::seconds(10);
constexpr size_t kMaxHeaderBytes = 8192;
constexpr int kMaxConnections = 1024;
constexpr int kThreads = 2;

}  // namespace

struct MetricsServer::Impl {
  std::mutex mu;
  std::map<std::string, std::vector<std::weak_ptr<prometheus::Collectable>>> paths;  // guarded
  std::atomic<int> connections{0};
  asio::io_context io{kThreads};
  tcp::acceptor acceptor{io};
  asio::steady_timer retry{io};  // after a failed accept (out of descriptors)
  std::vector<std::thread> threads;

  void Accept();
  // The answer to a GET or HEAD of `target`: 200 with the path's series, or 404.
  http::response<http::string_body> Answer(const http::request<http::empty_body>& req);
};

namespace {

// One client connection: a request read whole within kRequestTimeout, the
// answer written, then the next request on a kept-alive connection.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, MetricsServer::Impl* server)
      : stream_(std::move(socket)), buffer_(kMaxHeaderBytes), server_(server) {
    ++server_->connections;
  }
  ~Session() { --server_->connections; }

  void Read() {
    parser_.emplace();
    parser_->header_limit(kMaxHeaderBytes);
    stream_.expires_after(kRequestTimeout);  // slow or silent clients are dropped
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->Close();
                       self->Respond(self->parser_->release());
                     });
  }

 private:
  void Respond(const http::request<http::empty_body>& req) {
    response_ = server_->Answer(req);
    stream_.expires_after(kWriteTimeout);
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec || !self->response_.keep_alive()) return self->Close();
                        self->Read();
                      });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> parser_;
  http::response<http::string_body> response_;
  MetricsServer::Impl* server_;  // outlives every session (they die with its io_context)
};

}  // namespace

void MetricsServer::Impl::Accept() {
  acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;  // stopping
    if (ec) {
      // Out of descriptors, say: try again shortly rather than spin.
      retry.expires_after(std::chrono::milliseconds(50));
      retry.async_wait([this](beast::error_code e) {
        if (!e) Accept();
      });
      return;
    }
    if (connections.load() >= kMaxConnections) {
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      std::make_shared<Session>(std::move(socket), this)->Read();
    }
    Accept();
  });
}

http::response<http::string_body> MetricsServer::Impl::Answer(
    const http::request<http::empty_body>& req) {
  http::response<http::string_body> res;
  res.version(11);  // what the server speaks, whatever the request's version
  res.keep_alive(req.keep_alive());
  res.set(http::field::server, "antdt");
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    res.result(http::status::method_not_allowed);
    res.set(http::field::allow, "GET, HEAD");
    res.prepare_payload();
    return res;
  }
  std::string path(req.target());
  if (const size_t query = path.find('?'); query != std::string::npos) path.resize(query);
  std::vector<std::shared_ptr<prometheus::Collectable>> live;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = paths.find(path);
    if (it != paths.end()) {
      known = true;
      for (const auto& weak : it->second) {
        if (auto c = weak.lock()) live.push_back(std::move(c));
      }
    }
  }
  if (!known) {
    res.result(http::status::not_found);
    res.set(http::field::content_type, "text/plain");
    res.body() = "not found\n";
    res.prepare_payload();
    return res;
  }
  std::vector<prometheus::MetricFamily> families;
  for (const auto& c : live) {
    std::vector<prometheus::MetricFamily> more = c->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  }
  std::ostringstream body;
  prometheus::TextSerializer().Serialize(body, families);
  res.result(http::status::ok);
  res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res.body() = std::move(body).str();
  res.prepare_payload();
  if (req.method() == http::verb::head) res.body().clear();
  return res;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& listen,
                                                                    const std::string& field) {
  auto impl = std::make_unique<Impl>();
  if (absl::Status s = ListenOn(impl->acceptor, listen, field); !s.ok()) return s;
  impl->Accept();
  for (int i = 0; i < kThreads; ++i) {
    impl->threads.emplace_back([raw = impl.get()] { raw->io.run(); });
  }
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsServer::~MetricsServer() {
  impl_->io.stop();
  for (std::thread& t : impl_->threads) t.join();
}

void MetricsServer::RegisterCollectable(const std::weak_ptr<prometheus::Collectable>& collectable,
                                        const std::string& path) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->paths[path].push_back(collectable);
}

int MetricsServer::port() const { return impl_->acceptor.local_endpoint().port(); }

}  // namespace antdt
