#include "common/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

namespace antdt {

Process::Process(std::vector<std::string> argv, const std::string& log_path,
                 const std::map<std::string, std::string>& env) {
  pid_ = fork();
  if (pid_ < 0) std::abort();
  if (pid_ == 0) {
    // The parent may block termination signals for its own sigwait; the child
    // starts with none blocked (a blocked mask survives exec).
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
}

Process::~Process() {
  if (Running()) {
    Signal(SIGKILL);
    Wait(std::chrono::seconds(10));
  }
}

void Process::Signal(int sig) {
  if (pid_ > 0 && !status_) kill(pid_, sig);
}

std::optional<int> Process::Wait(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      status_ = status;
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool Process::Running() {
  if (pid_ <= 0 || status_) return false;
  return !Wait(std::chrono::milliseconds(0)).has_value();
}

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

std::optional<std::string> WaitForReadyFile(const std::string& path,
                                            std::chrono::milliseconds timeout) {
  std::string line;
  bool ok = WaitFor(
      [&] {
        std::ifstream in(path);
        return in && std::getline(in, line) && !line.empty();
      },
      timeout);
  if (!ok) return std::nullopt;
  return line;
}

std::optional<std::string> ReadyFileField(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
  }
  return std::nullopt;
}

std::string Tail(const std::string& path, size_t bytes) {
  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return all.size() > bytes ? all.substr(all.size() - bytes) : all;
}

int ConnectAndSend(const std::string& address, const std::string& bytes) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return -1;
  std::string host = address.substr(0, colon);
  std::string port = address.substr(colon + 1);
  if (!host.empty() && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return -1;
  int fd = socket(res->ai_family, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    freeaddrinfo(res);
    if (fd >= 0) close(fd);
    return -1;
  }
  freeaddrinfo(res);
  if (!bytes.empty() &&
      write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

std::optional<std::string> HttpGet(const std::string& address, const std::string& path) {
  const int fd =
      ConnectAndSend(address, "GET " + path + " HTTP/1.0\r\nHost: " + address + "\r\n\r\n");
  if (fd < 0) return std::nullopt;
  std::string resp;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) resp.append(buf, static_cast<size_t>(n));
  close(fd);
  size_t body = resp.find("\r\n\r\n");
  if (resp.rfind("HTTP/1.", 0) != 0 || resp.find(" 200 ") == std::string::npos ||
      body == std::string::npos) {
    return std::nullopt;
  }
  return resp.substr(body + 4);
}

std::optional<std::string> HttpsGet(const std::string& address, const std::string& path,
                                    const std::string& ca_file, const std::string& host) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        &SSL_CTX_free);
  if (SSL_CTX_load_verify_locations(ctx.get(), ca_file.c_str(), nullptr) != 1) return std::nullopt;
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  std::unique_ptr<BIO, decltype(&BIO_free_all)> bio(BIO_new_ssl_connect(ctx.get()), &BIO_free_all);
  SSL* ssl = nullptr;
  BIO_get_ssl(bio.get(), &ssl);
  SSL_set1_host(ssl, host.c_str());
  BIO_set_conn_hostname(bio.get(), address.c_str());
  if (BIO_do_connect(bio.get()) != 1 || BIO_do_handshake(bio.get()) != 1) {
    ERR_clear_error();
    return std::nullopt;
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
  BIO_write(bio.get(), request.data(), static_cast<int>(request.size()));
  std::string out;
  char buffer[4096];
  for (int n; (n = BIO_read(bio.get(), buffer, sizeof(buffer))) > 0;) out.append(buffer, n);
  return out;
}

}  // namespace antdt
