// Pure parsing helpers shared by every binary's config: durations, addresses,
// and a small command-line flag reader. Errors name the field.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace antdt {

// "250ms", "30s", "2m", "1h" (also "1.5s") -> milliseconds. `field` names the
// field in the error.
absl::StatusOr<int64_t> ParseDurationMs(const std::string& text, const std::string& field);

// "HOST:PORT" with PORT in [0, 65535] ("[::1]:0" too).
absl::Status ValidateHostPort(const std::string& text, const std::string& field);
// A DNS-1123 label (a Kubernetes namespace or object name):
// [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters.
bool IsDns1123Label(const std::string& s);

// Reads `--name value` and `--name=value`; a flag listed in `bool_flags` takes
// no value. Positional arguments are returned under "" in order. An unknown
// flag (not in `known`) is an error naming it.
struct ParsedFlags {
  std::map<std::string, std::string> values;
  std::vector<std::string> positional;
  bool Has(const std::string& name) const { return values.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const {
    auto it = values.find(name);
    return it == values.end() ? fallback : it->second;
  }
};
absl::StatusOr<ParsedFlags> ParseFlags(int argc, const char* const* argv,
                                       const std::vector<std::string>& known,
                                       const std::vector<std::string>& bool_flags = {});

// A binary's command line, by the convention every AntDT binary shares:
// ParseFlags with --help, --grpc-reflection (GrpcReflectionRequested) and the --tls-* flags
// (common/tls.h: the process's TLS, files checked, else exit 2); on a bad flag the usage
// and "program: error" on stderr (exit 2), on --help the usage on stdout (exit 0), a positional
// argument is "program: unexpected argument X" (exit 2). Returns the flags,
// or nullopt with `*exit_code` set to what main() returns.
// Whether the command line asked for gRPC server reflection
// (--grpc-reflection): the servers of this process offer it then, and only
// then (common/serve.h).
bool GrpcReflectionRequested();

std::optional<ParsedFlags> ParseCommandLine(int argc, const char* const* argv,
                                            const std::string& program, const char* usage,
                                            const std::vector<std::string>& known, int* exit_code);

// Walks the top-level keys of a YAML config (a mapping) and calls
// `set(key, value)` for each. Scalars come as they are; a list of scalars as
// "a,b,"; a mapping of scalars as "k=v,k2=v2,". Errors name the key
// ("labels.zone: must be a string", "config: not valid YAML: ...").
absl::Status ForEachYamlField(
    const std::string& yaml,
    const std::function<absl::Status(const std::string& key, const std::string& value)>& set);

absl::StatusOr<std::string> ReadFile(const std::string& path);

// A server's config: defaults, then the YAML of --config (when given), then
// the other flags. `parse` reads YAML text; `apply` lays flags over a config.
template <typename Config, typename Parse, typename Apply>
absl::StatusOr<Config> LoadConfig(const ParsedFlags& flags, Parse parse, Apply apply) {
  Config config;
  if (flags.Has("config")) {
    absl::StatusOr<std::string> text = ReadFile(flags.Get("config"));
    if (!text.ok()) {
      return absl::InvalidArgumentError("--config: " + std::string(text.status().message()));
    }
    absl::StatusOr<Config> parsed = parse(*text);
    if (!parsed.ok()) return parsed.status();
    config = *std::move(parsed);
  }
  return apply(std::move(config), flags);
}

// Writes `content` to `path` atomically (temporary file, then rename).
absl::Status WriteFileAtomically(const std::string& path, const std::string& content);

}  // namespace antdt
