// Where the API server is and how to authenticate to it: a kubeconfig file,
// or the in-cluster service account. Pure parsing plus file reads; no network.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace antdt::kube {

struct ClusterConfig {
  std::string server;   // "https://10.0.0.1:443", "http://127.0.0.1:8080"
  std::string ca_file;  // PEM file of the CA(s) to trust
  std::string ca_data;  // PEM text of the CA(s) to trust (decoded, not base64)
  bool insecure_skip_tls_verify = false;
  std::string token;       // a static bearer token
  std::string token_file;  // re-read periodically (projected tokens rotate); wins over `token`
  std::string client_cert_data;        // PEM
  std::string client_key_data;         // PEM
  std::string namespace_ = "default";  // the context's (or service account's) namespace
};

// Reads a kubeconfig: `context` (or the file's current-context) selects the
// cluster, the user and the namespace. Relative file paths are resolved
// against the kubeconfig's directory; client-certificate/client-key files are
// read into the *_data fields. Errors name the field, e.g.
// `kubeconfig /x: contexts[0].context.cluster: cluster "foo" not found`.
// exec and auth-provider users are not supported (an error).
absl::StatusOr<ClusterConfig> LoadKubeconfig(const std::string& path,
                                             const std::string& context = "");

// The in-cluster config: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT,
// the token file, ca.crt and namespace from `sa_dir`. FailedPrecondition when
// the environment variables are missing (not in a cluster).
absl::StatusOr<ClusterConfig> InClusterConfig(
    const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// The operator's choice: `kubeconfig_flag` when not empty, else in-cluster when
// KUBERNETES_SERVICE_HOST is set, else the first file of $KUBECONFIG, else
// ~/.kube/config.
absl::StatusOr<ClusterConfig> ResolveConfig(const std::string& kubeconfig_flag);

}  // namespace antdt::kube
