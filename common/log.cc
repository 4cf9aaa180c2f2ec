#include "common/log.h"

#include <cstdio>
#include <ctime>
#include <mutex>

namespace antdt {
namespace {

std::mutex& LogMutex() {
  static std::mutex mu;
  return mu;
}

FILE*& LogSink() {
  static FILE* sink = nullptr;
  return sink;
}

bool NeedsQuotes(const std::string& v) {
  if (v.empty()) return true;
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || c == '\n') return true;
  }
  return false;
}

}  // namespace

void LogEvent(std::string_view event, std::initializer_list<LogField> fields) {
  char ts[32];
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::string line = std::string("ts=") + ts + " event=" + std::string(event);
  for (const LogField& f : fields) {
    line += ' ';
    line += f.key;
    line += '=';
    if (NeedsQuotes(f.value)) {
      line += '"';
      for (char c : f.value) {
        if (c == '"' || c == '\\') line += '\\';
        line += (c == '\n') ? ' ' : c;
      }
      line += '"';
    } else {
      line += f.value;
    }
  }
  line += '\n';
  std::lock_guard<std::mutex> lock(LogMutex());
  FILE* out = LogSink() != nullptr ? LogSink() : stderr;
  std::fputs(line.c_str(), out);
  std::fflush(out);
}

bool SetLogFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return false;
  std::lock_guard<std::mutex> lock(LogMutex());
  if (LogSink() != nullptr) std::fclose(LogSink());
  LogSink() = f;
  return true;
}

}  // namespace antdt
