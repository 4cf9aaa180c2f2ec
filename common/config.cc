#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/spelling.h"
#include "common/tls.h"

namespace antdt {

absl::StatusOr<int64_t> ParseDurationMs(const std::string& text, const std::string& field) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": must be a duration like \"30s\", \"500ms\" or \"2m\", got \"", text, "\""));
  };
  size_t unit_pos = text.find_first_not_of("0123456789.");
  if (text.empty() || unit_pos == 0 || unit_pos == std::string::npos) return bad();
  double value = 0;
  if (!absl::SimpleAtod(text.substr(0, unit_pos), &value) || value < 0) return bad();
  const std::string unit = text.substr(unit_pos);
  double scale = 0;
  if (unit == "ms") {
    scale = 1;
  } else if (unit == "s") {
    scale = 1000;
  } else if (unit == "m") {
    scale = 60'000;
  } else if (unit == "h") {
    scale = 3'600'000;
  } else {
    return bad();
  }
  return static_cast<int64_t>(value * scale + 0.5);
}

bool IsDns1123Label(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  for (char c : s) {
    if (!alnum(c) && c != '-') return false;
  }
  return alnum(s.front()) && alnum(s.back());
}

absl::Status ValidateHostPort(const std::string& text, const std::string& field) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must be HOST:PORT, e.g. 127.0.0.1:0 (",
                                                   why, "), got \"", text, "\""));
  };
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("no host");
  int port = 0;
  if (!absl::SimpleAtoi(text.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return bad("port out of range");
  }
  return absl::OkStatus();
}

absl::StatusOr<ParsedFlags> ParseFlags(int argc, const char* const* argv,
                                       const std::vector<std::string>& known,
                                       const std::vector<std::string>& bool_flags) {
  ParsedFlags out;
  auto is = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      out.positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (!is(known, name) && !is(bool_flags, name)) {
      std::vector<std::string> names = known;
      names.insert(names.end(), bool_flags.begin(), bool_flags.end());
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": unknown flag", DidYouMean(name, names, "--")));
    }
    if (is(bool_flags, name)) {
      out.values[name] = has_value ? value : "true";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat("--", name, ": needs a value"));
      value = argv[++i];
    }
    out.values[name] = value;
  }
  return out;
}

namespace {
std::atomic<bool> grpc_reflection{false};
}  // namespace

bool GrpcReflectionRequested() { return grpc_reflection.load(); }

std::optional<ParsedFlags> ParseCommandLine(int argc, const char* const* argv,
                                            const std::string& program, const char* usage,
                                            const std::vector<std::string>& known, int* exit_code) {
  std::vector<std::string> with_common = known;
  with_common.push_back("grpc-reflection");
  with_common.insert(with_common.end(), TlsFlagNames().begin(), TlsFlagNames().end());
  absl::StatusOr<ParsedFlags> flags =
      ParseFlags(argc, argv, with_common, {"help", "grpc-reflection"});
  *exit_code = 2;
  if (!flags.ok()) {
    std::fputs(usage, stderr);
    std::fprintf(stderr, "%s: %s\n", program.c_str(),
                 std::string(flags.status().message()).c_str());
    return std::nullopt;
  }
  if (flags->Has("help")) {
    std::fputs(usage, stdout);
    std::fputs(kTlsFlagsUsage, stdout);
    *exit_code = 0;
    return std::nullopt;
  }
  if (!flags->positional.empty()) {
    std::fprintf(stderr, "%s: unexpected argument %s\n", program.c_str(),
                 flags->positional[0].c_str());
    return std::nullopt;
  }
  if (flags->Has("grpc-reflection")) {
    grpc_reflection = true;
    flags->values.erase("grpc-reflection");  // not a field of any config
  }
  if (absl::Status tls = ConfigureTlsFromFlags(*flags); !tls.ok()) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), std::string(tls.message()).c_str());
    return std::nullopt;
  }
  return *std::move(flags);
}

absl::Status ForEachYamlField(
    const std::string& yaml,
    const std::function<absl::Status(const std::string& key, const std::string& value)>& set) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config: not valid YAML: ", e.what()));
  }
  if (root.IsNull()) return absl::OkStatus();
  if (!root.IsMap()) return absl::InvalidArgumentError("config: must be a mapping");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    std::string value;
    if (kv.second.IsScalar()) {
      value = kv.second.as<std::string>();
    } else if (kv.second.IsSequence()) {
      for (const auto& item : kv.second) {
        if (!item.IsScalar()) {
          return absl::InvalidArgumentError(absl::StrCat(key, ": must be a list of strings"));
        }
        absl::StrAppend(&value, item.as<std::string>(), ",");
      }
    } else if (kv.second.IsMap()) {
      for (const auto& item : kv.second) {
        const std::string k = item.first.as<std::string>();
        if (!item.second.IsScalar()) {
          return absl::InvalidArgumentError(absl::StrCat(key, ".", k, ": must be a string"));
        }
        absl::StrAppend(&value, k, "=", item.second.as<std::string>(), ",");
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(key, ": must be a scalar"));
    }
    absl::Status s = set(key, value);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write ", tmp));
    out << content;
    if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace antdt
