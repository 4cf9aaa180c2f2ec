#include "backends/kubernetes/client/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/config.h"
#include "common/status.h"

namespace antdt::kube {
namespace {

namespace fs = std::filesystem;

// Errors about one kubeconfig file, prefixed with its path.
class KubeconfigReader {
 public:
  KubeconfigReader(std::string path, YAML::Node root)
      : path_(std::move(path)), root_(std::move(root)) {
    dir_ = fs::path(path_).parent_path().string();
  }

  absl::Status Error(const std::string& field, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path_, ": ", field, ": ", what));
  }

  // The scalar `key` of mapping `node` at `field`; "" when absent.
  absl::StatusOr<std::string> String(const YAML::Node& node, const std::string& field,
                                     const std::string& key) const {
    YAML::Node value = node[key];
    if (!value || value.IsNull()) return std::string();
    if (!value.IsScalar()) return Error(field + "." + key, "must be a string");
    return value.Scalar();
  }

  absl::StatusOr<bool> Bool(const YAML::Node& node, const std::string& field,
                            const std::string& key) const {
    YAML::Node value = node[key];
    if (!value || value.IsNull()) return false;
    bool result = false;
    if (!value.IsScalar() || !YAML::convert<bool>::decode(value, result)) {
      return Error(field + "." + key, "must be true or false");
    }
    return result;
  }

  // A path from the file, relative to the kubeconfig's directory.
  std::string Resolve(const std::string& file) const {
    if (file.empty() || fs::path(file).is_absolute()) return file;
    return (fs::path(dir_) / file).lexically_normal().string();
  }

  absl::StatusOr<std::string> ReadFileField(const std::string& field,
                                            const std::string& file) const {
    absl::StatusOr<std::string> content = antdt::ReadFile(Resolve(file));
    if (!content.ok()) {
      return Error(field,
                   absl::StrCat("cannot read ", Resolve(file), ": ", content.status().message()));
    }
    return content;
  }

  absl::StatusOr<std::string> Base64Field(const std::string& field, const std::string& text) const {
    std::string decoded;
    std::string compact = text;
    compact.erase(std::remove_if(compact.begin(), compact.end(),
                                 [](unsigned char c) { return absl::ascii_isspace(c); }),
                  compact.end());
    if (!absl::Base64Unescape(compact, &decoded)) return Error(field, "not valid base64");
    return decoded;
  }

  // The entry named `name` of the list `list_key` ("contexts"), as
  // {index, entry[inner_key]}. `ref_field` names the field that referred to it.
  absl::StatusOr<std::pair<int, YAML::Node>> Find(const std::string& list_key,
                                                  const std::string& inner_key,
                                                  const std::string& kind, const std::string& name,
                                                  const std::string& ref_field) const {
    YAML::Node list = root_[list_key];
    if (list && !list.IsNull() && !list.IsSequence()) return Error(list_key, "must be a list");
    if (list && list.IsSequence()) {
      for (size_t i = 0; i < list.size(); ++i) {
        std::string field = absl::StrCat(list_key, "[", i, "]");
        if (!list[i].IsMap()) return Error(field, "must be a mapping");
        ASSIGN_OR_RETURN(std::string entry_name, String(list[i], field, "name"));
        if (entry_name != name) continue;
        YAML::Node inner = list[i][inner_key];
        if (inner && !inner.IsNull() && !inner.IsMap()) {
          return Error(field + "." + inner_key, "must be a mapping");
        }
        return std::make_pair(static_cast<int>(i), inner ? inner : YAML::Node(YAML::NodeType::Map));
      }
    }
    return Error(ref_field, absl::StrCat(kind, " \"", name, "\" not found"));
  }

  absl::StatusOr<ClusterConfig> Load(const std::string& context_flag) const {
    if (!root_.IsMap()) return Error("top level", "must be a mapping");
    std::string context_name = context_flag;
    std::string context_ref = "context";
    if (context_name.empty()) {
      ASSIGN_OR_RETURN(context_name, String(root_, "", "current-context"));
      context_ref = "current-context";
      if (context_name.empty()) {
        return Error("current-context", "not set (and no context was requested)");
      }
    }
    ASSIGN_OR_RETURN(auto context,
                     Find("contexts", "context", "context", context_name, context_ref));
    std::string cfield = absl::StrCat("contexts[", context.first, "].context");

    ClusterConfig config;
    ASSIGN_OR_RETURN(std::string ns, String(context.second, cfield, "namespace"));
    if (!ns.empty()) config.namespace_ = ns;

    ASSIGN_OR_RETURN(std::string cluster_name, String(context.second, cfield, "cluster"));
    if (cluster_name.empty()) return Error(cfield + ".cluster", "missing");
    ASSIGN_OR_RETURN(auto cluster,
                     Find("clusters", "cluster", "cluster", cluster_name, cfield + ".cluster"));
    std::string kfield = absl::StrCat("clusters[", cluster.first, "].cluster");
    ASSIGN_OR_RETURN(config.server, String(cluster.second, kfield, "server"));
    if (config.server.empty()) return Error(kfield + ".server", "missing");
    ASSIGN_OR_RETURN(std::string ca_file, String(cluster.second, kfield, "certificate-authority"));
    config.ca_file = Resolve(ca_file);
    ASSIGN_OR_RETURN(std::string ca_data,
                     String(cluster.second, kfield, "certificate-authority-data"));
    if (!ca_data.empty()) {
      ASSIGN_OR_RETURN(config.ca_data,
                       Base64Field(kfield + ".certificate-authority-data", ca_data));
    }
    ASSIGN_OR_RETURN(config.insecure_skip_tls_verify,
                     Bool(cluster.second, kfield, "insecure-skip-tls-verify"));

    ASSIGN_OR_RETURN(std::string user_name, String(context.second, cfield, "user"));
    if (user_name.empty()) return config;  // no credentials
    ASSIGN_OR_RETURN(auto user, Find("users", "user", "user", user_name, cfield + ".user"));
    std::string ufield = absl::StrCat("users[", user.first, "].user");
    for (const char* unsupported : {"exec", "auth-provider"}) {
      if (user.second[unsupported]) {
        return Error(ufield + "." + unsupported, "not supported by the operator");
      }
    }
    ASSIGN_OR_RETURN(config.token, String(user.second, ufield, "token"));
    ASSIGN_OR_RETURN(std::string token_file, String(user.second, ufield, "tokenFile"));
    config.token_file = Resolve(token_file);

    ASSIGN_OR_RETURN(std::string cert_data, String(user.second, ufield, "client-certificate-data"));
    ASSIGN_OR_RETURN(std::string cert_file, String(user.second, ufield, "client-certificate"));
    if (!cert_data.empty()) {
      ASSIGN_OR_RETURN(config.client_cert_data,
                       Base64Field(ufield + ".client-certificate-data", cert_data));
    } else if (!cert_file.empty()) {
      ASSIGN_OR_RETURN(config.client_cert_data,
                       ReadFileField(ufield + ".client-certificate", cert_file));
    }
    ASSIGN_OR_RETURN(std::string key_data, String(user.second, ufield, "client-key-data"));
    ASSIGN_OR_RETURN(std::string key_file, String(user.second, ufield, "client-key"));
    if (!key_data.empty()) {
      ASSIGN_OR_RETURN(config.client_key_data, Base64Field(ufield + ".client-key-data", key_data));
    } else if (!key_file.empty()) {
      ASSIGN_OR_RETURN(config.client_key_data, ReadFileField(ufield + ".client-key", key_file));
    }
    if (config.client_cert_data.empty() != config.client_key_data.empty()) {
      return Error(ufield, "client-certificate and client-key must be given together");
    }
    return config;
  }

 private:
  std::string path_;
  std::string dir_;
  YAML::Node root_;
};

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

absl::StatusOr<ClusterConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  absl::StatusOr<std::string> text = antdt::ReadFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig ", path, ": ", text.status().message()));
  }
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig ", path, ": not valid YAML: ", e.what()));
  }
  try {
    return KubeconfigReader(path, root).Load(context);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": ", e.what()));
  }
}

absl::StatusOr<ClusterConfig> InClusterConfig(const std::string& sa_dir) {
  std::string host = Env("KUBERNETES_SERVICE_HOST");
  std::string port = Env("KUBERNETES_SERVICE_PORT");
  if (host.empty() || port.empty()) {
    return absl::FailedPreconditionError(
        "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be "
        "set");
  }
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  ClusterConfig config;
  config.server = "https://" + host + ":" + port;
  config.token_file = sa_dir + "/token";
  absl::StatusOr<std::string> token = antdt::ReadFile(config.token_file);
  if (!token.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("in-cluster config: service account token ",
                                                      config.token_file, ": ",
                                                      token.status().message()));
  }
  std::error_code ec;
  if (fs::exists(sa_dir + "/ca.crt", ec)) config.ca_file = sa_dir + "/ca.crt";
  absl::StatusOr<std::string> ns = antdt::ReadFile(sa_dir + "/namespace");
  if (ns.ok()) {
    std::string trimmed(absl::StripAsciiWhitespace(*ns));
    if (!trimmed.empty()) config.namespace_ = trimmed;
  }
  return config;
}

absl::StatusOr<ClusterConfig> ResolveConfig(const std::string& kubeconfig_flag) {
  if (!kubeconfig_flag.empty()) return LoadKubeconfig(kubeconfig_flag);
  if (!Env("KUBERNETES_SERVICE_HOST").empty()) return InClusterConfig();
  std::string env = Env("KUBECONFIG");
  if (!env.empty()) {
    std::error_code ec;
    for (absl::string_view part : absl::StrSplit(env, ':', absl::SkipEmpty())) {
      std::string file(part);
      if (fs::exists(file, ec)) return LoadKubeconfig(file);
    }
    return absl::NotFoundError("KUBECONFIG=" + env + ": none of its files exists");
  }
  std::string home = Env("HOME");
  if (home.empty()) {
    return absl::NotFoundError(
        "no Kubernetes config: not in a cluster, no --kubeconfig, no $KUBECONFIG and no $HOME");
  }
  std::string file = home + "/.kube/config";
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    return absl::NotFoundError(
        "no Kubernetes config: not in a cluster, no --kubeconfig, no "
        "$KUBECONFIG and no " +
        file);
  }
  return LoadKubeconfig(file);
}

}  // namespace antdt::kube
