// Child processes, ready files and waiting on conditions with deadlines (never
// fixed sleeps): used by the local runner, the demo and the tests.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace antdt {

// A child process; killed with SIGKILL on destruction if still running.
class Process {
 public:
  // Runs `argv[0]` with `argv`, stdout and stderr appended to `log_path`.
  Process(std::vector<std::string> argv, const std::string& log_path,
          const std::map<std::string, std::string>& env = {});
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Waits for exit; returns the wait status, or nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  bool Running();

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// Polls `pred` until it is true or `timeout` passes.
bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

// Waits for a ready file to appear and returns its first line (the address).
std::optional<std::string> WaitForReadyFile(const std::string& path,
                                            std::chrono::milliseconds timeout);
// Value of `key=` in a ready file's later lines, e.g. "metrics".
std::optional<std::string> ReadyFileField(const std::string& path, const std::string& key);

// The last `bytes` of a file (a child's log), or "" when it cannot be read.
std::string Tail(const std::string& path, size_t bytes);

// A TCP connection to `address` (HOST:PORT) that has sent `bytes` (maybe
// none): its descriptor, or -1. The caller closes it.
int ConnectAndSend(const std::string& address, const std::string& bytes);
// GET http://address/path over a plain socket; the body, or nullopt.
std::optional<std::string> HttpGet(const std::string& address, const std::string& path);
// GET https://address/path trusting the CA bundle `ca_file` and checking that
// the certificate names `host`; the whole response (status line, headers,
// body), or nullopt when TLS fails.
std::optional<std::string> HttpsGet(const std::string& address, const std::string& path,
                                    const std::string& ca_file, const std::string& host);

}  // namespace antdt
