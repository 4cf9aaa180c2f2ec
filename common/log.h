// One event per line, key=value fields, to stderr:
//   LogEvent("lease_expired", {{"dataset", key}, {"token", token}});
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace antdt {

struct LogField {
  LogField(std::string_view k, std::string_view v) : key(k), value(v) {}
  LogField(std::string_view k, const char* v) : key(k), value(v) {}
  LogField(std::string_view k, const std::string& v) : key(k), value(v) {}
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  LogField(std::string_view k, T v) : key(k), value(std::to_string(v)) {}
  std::string key;
  std::string value;
};

void LogEvent(std::string_view event, std::initializer_list<LogField> fields = {});

// Sends log lines to `path` (appended) instead of stderr; for a command that
// draws a progress bar on the terminal. Returns false when it cannot open it.
bool SetLogFile(const std::string& path);

}  // namespace antdt
