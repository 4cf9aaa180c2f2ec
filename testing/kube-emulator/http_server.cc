#include "testing/kube-emulator/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace antdt::kubeemu {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;

template <class Stream>
class BeastWriter : public ResponseWriter {
 public:
  BeastWriter(Stream& stream, int fd, unsigned version, bool keep_alive)
      : stream_(stream), fd_(fd), version_(version), keep_alive_(keep_alive) {}

  void Send(const HttpResponse& r) override {
    http::response<http::string_body> res{static_cast<http::status>(r.code), version_};
    res.set(http::field::server, "antdt-kube-emulator");
    res.set(http::field::content_type, r.content_type);
    res.set(http::field::cache_control, "no-cache, private");
    for (const auto& [k, v] : r.headers) res.insert(k, v);
    res.keep_alive(keep_alive_);
    res.body() = r.body;
    res.prepare_payload();
    beast::error_code ec;
    http::write(stream_, res, ec);
    if (ec) broken_ = true;
  }

  bool StartStream(const std::string& content_type) override {
    http::response<http::empty_body> res{http::status::ok, version_};
    res.set(http::field::server, "antdt-kube-emulator");
    res.set(http::field::content_type, content_type);
    res.set(http::field::cache_control, "no-cache, private");
    res.keep_alive(keep_alive_);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    beast::error_code ec;
    http::write_header(stream_, sr, ec);
    if (ec) broken_ = true;
    return !broken_;
  }

  bool WriteChunk(const std::string& data) override {
    if (broken_) return false;
    beast::error_code ec;
    net::write(stream_, http::make_chunk(net::buffer(data)), ec);
    if (ec) broken_ = true;
    return !broken_;
  }

  void EndStream() override {
    if (broken_) return;
    beast::error_code ec;
    net::write(stream_, http::make_chunk_last(), ec);
    if (ec) broken_ = true;
  }

  void Abort() override {
    broken_ = true;
    ::shutdown(fd_, SHUT_RDWR);
  }

  bool PeerClosed() override {
    char c;
    ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

  bool broken() const { return broken_; }

 private:
  Stream& stream_;
  int fd_;
  unsigned version_;
  bool keep_alive_;
  bool broken_ = false;
};

template <class Stream>
void ServeStream(Stream& stream, int fd, Emulator* emulator) {
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    beast::error_code ec;
    http::read(stream, buffer, parser, ec);
    if (ec) return;
    const auto& req = parser.get();
    HttpRequest r;
    r.method = std::string(req.method_string());
    std::string target(req.target());
    size_t q = target.find('?');
    r.path = target.substr(0, q);
    r.query = q == std::string::npos ? "" : target.substr(q + 1);
    r.params = ParseQuery(r.query);
    r.content_type = std::string(req[http::field::content_type]);
    r.accept = std::string(req[http::field::accept]);
    r.user_agent = std::string(req[http::field::user_agent]);
    r.authorization = std::string(req[http::field::authorization]);
    r.body = req.body();
    BeastWriter<Stream> writer(stream, fd, req.version(), req.keep_alive());
    emulator->Handle(r, writer);
    if (writer.broken() || !req.keep_alive()) return;
  }
}

class BeastServer : public HttpServer {
 public:
  BeastServer(Emulator* emulator) : emulator_(emulator), acceptor_(ioc_) {}

  absl::Status Init(const ServerOptions& options) {
    size_t colon = options.listen.rfind(':');
    if (colon == std::string::npos) return absl::InvalidArgumentError("--listen: want HOST:PORT");
    std::string host = options.listen.substr(0, colon);
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    int port = std::atoi(options.listen.substr(colon + 1).c_str());
    try {
      if (!options.tls_cert.empty() || !options.tls_key.empty()) {
        tls_ = std::make_unique<ssl::context>(ssl::context::tls_server);
        tls_->use_certificate_chain_file(options.tls_cert);
        tls_->use_private_key_file(options.tls_key, ssl::context::pem);
      }
      tcp::endpoint ep(net::ip::make_address(host), static_cast<unsigned short>(port));
      acceptor_.open(ep.protocol());
      acceptor_.set_option(net::socket_base::reuse_address(true));
      acceptor_.bind(ep);
      acceptor_.listen(net::socket_base::max_listen_connections);
      address_ =
          absl::StrCat(options.listen.substr(0, colon), ":", acceptor_.local_endpoint().port());
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot listen on ", options.listen, ": ", e.what()));
    }
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    return absl::OkStatus();
  }

  ~BeastServer() override { Stop(); }

  std::string address() const override { return address_; }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    if (accept_thread_.joinable()) accept_thread_.join();
    beast::error_code ec;
    acceptor_.close(ec);
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
      done_.wait_for(lock, std::chrono::seconds(5), [this] { return fds_.empty(); });
      if (!fds_.empty()) {
        std::fprintf(stderr, "antdt-kube-emulator: %zu connections still open at stop\n",
                     fds_.size());
      }
    }
    JoinFinished();
    // Those still serving (none unless the wait ran out) are left to end
    // with the process.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, thread] : threads_) thread.detach();
    threads_.clear();
  }

 private:
  void AcceptLoop() {
    for (;;) {
      tcp::socket socket(ioc_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (stopped_) return;
      if (ec) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      socket.set_option(tcp::no_delay(true), ec);
      int fd = socket.native_handle();
      JoinFinished();
      // Joined, not detached: a connection's thread ends only after its
      // thread-local state (OpenSSL's per-thread random generators) is freed,
      // so none is still exiting when the process does.
      std::lock_guard<std::mutex> lock(mu_);
      uint64_t id = next_thread_++;
      fds_.insert(fd);
      threads_.emplace(id, std::thread([this, s = std::move(socket), fd, id]() mutable {
                         Serve(s, fd);
                         beast::error_code ignored;
                         s.shutdown(tcp::socket::shutdown_both, ignored);
                         std::lock_guard<std::mutex> done(mu_);
                         fds_.erase(fd);
                         finished_.push_back(id);
                         s.close(ignored);
                         done_.notify_all();
                       }));
    }
  }

  // Joins the connection threads that have served their connection.
  void JoinFinished() {
    std::vector<std::thread> finished;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (uint64_t id : finished_) {
        auto it = threads_.find(id);
        finished.push_back(std::move(it->second));
        threads_.erase(it);
      }
      finished_.clear();
    }
    for (std::thread& thread : finished) thread.join();
  }

  void Serve(tcp::socket& socket, int fd) {
    try {
      if (tls_) {
        ssl::stream<tcp::socket&> stream(socket, *tls_);
        beast::error_code ec;
        stream.handshake(ssl::stream_base::server, ec);
        if (ec) return;
        ServeStream(stream, fd, emulator_);
        stream.shutdown(ec);
      } else {
        ServeStream(socket, fd, emulator_);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "connection error: %s\n", e.what());
    }
  }

  Emulator* emulator_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  std::unique_ptr<ssl::context> tls_;
  std::string address_;
  std::thread accept_thread_;
  std::atomic<bool> stopped_{false};
  std::mutex mu_;
  std::condition_variable done_;
  std::set<int> fds_;                        // connections being served
  std::map<uint64_t, std::thread> threads_;  // their threads, until joined
  std::vector<uint64_t> finished_;           // threads_ done serving, to join
  uint64_t next_thread_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const ServerOptions& options,
                                                              Emulator* emulator) {
  auto server = std::make_unique<BeastServer>(emulator);
  if (absl::Status s = server->Init(options); !s.ok()) return s;
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace antdt::kubeemu
