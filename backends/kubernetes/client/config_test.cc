#include "backends/kubernetes/client/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/escaping.h"
#include "common/config.h"
#include "common/testing/testing.h"

namespace antdt::kube {
namespace {

using ::testing::HasSubstr;

class KubeconfigTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& content) {
    std::string path = dir_.File(name);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    EXPECT_TRUE(WriteFileAtomically(path, content).ok());
    return path;
  }
  antdt::testing::TempDir dir_;
};

constexpr char kTwoContexts[] = R"(
apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context: {cluster: c-dev, user: u-token, namespace: team-a}
- name: prod
  context: {cluster: c-prod, user: u-cert}
- name: anon
  context: {cluster: c-dev}
clusters:
- name: c-dev
  cluster:
    server: http://127.0.0.1:8080
    insecure-skip-tls-verify: true
- name: c-prod
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority: certs/ca.crt
users:
- name: u-token
  user: {token: abc123}
- name: u-cert
  user:
    client-certificate: certs/client.crt
    client-key: /abs/ignored.key
    client-key-data: S0VZ
    tokenFile: tok
)";

TEST_F(KubeconfigTest, CurrentContext) {
  std::string path = Write("config", kTwoContexts);
  absl::StatusOr<ClusterConfig> config = LoadKubeconfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "http://127.0.0.1:8080");
  EXPECT_TRUE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->token, "abc123");
  EXPECT_EQ(config->token_file, "");
  EXPECT_EQ(config->namespace_, "team-a");
  EXPECT_EQ(config->ca_file, "");
}

TEST_F(KubeconfigTest, NamedContextWithFilesRelativeToTheKubeconfig) {
  std::string path = Write("kube/config", kTwoContexts);
  Write("kube/certs/client.crt", "CERT");
  absl::StatusOr<ClusterConfig> config = LoadKubeconfig(path, "prod");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.0.0.1:6443");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->ca_file, dir_.File("kube/certs/ca.crt"));
  EXPECT_EQ(config->client_cert_data, "CERT");
  EXPECT_EQ(config->client_key_data, "KEY");  // -data wins over the file
  EXPECT_EQ(config->token_file, dir_.File("kube/tok"));
  EXPECT_EQ(config->namespace_, "default");
}

TEST_F(KubeconfigTest, ContextWithoutUser) {
  absl::StatusOr<ClusterConfig> config = LoadKubeconfig(Write("config", kTwoContexts), "anon");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->token, "");
  EXPECT_EQ(config->server, "http://127.0.0.1:8080");
}

TEST_F(KubeconfigTest, Base64Data) {
  std::string ca = "-----BEGIN CERTIFICATE-----\nMII...\n-----END CERTIFICATE-----\n";
  std::string yaml =
      "current-context: x\n"
      "contexts: [{name: x, context: {cluster: k, user: u}}]\n"
      "clusters: [{name: k, cluster: {server: 'https://[::1]:6443', "
      "certificate-authority-data: " +
      absl::Base64Escape(ca) +
      "}}]\n"
      "users: [{name: u, user: {client-certificate-data: " +
      absl::Base64Escape("C") + ", client-key-data: " + absl::Base64Escape("K") +
      ", tokenFile: /var/tok}}]\n";
  absl::StatusOr<ClusterConfig> config = LoadKubeconfig(Write("config", yaml));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ca_data, ca);
  EXPECT_EQ(config->client_cert_data, "C");
  EXPECT_EQ(config->client_key_data, "K");
  EXPECT_EQ(config->token_file, "/var/tok");
}

TEST_F(KubeconfigTest, ErrorsNameTheField) {
  std::string path = Write("config", kTwoContexts);
  absl::StatusOr<ClusterConfig> config = LoadKubeconfig(path, "nope");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("kubeconfig " + path + ": context: context \"nope\" not found"));

  std::string bad_cluster = Write("bad-cluster", R"(
current-context: x
contexts:
- name: x
  context: {cluster: foo, user: u}
clusters: []
users: [{name: u, user: {}}]
)");
  config = LoadKubeconfig(bad_cluster);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(
      config.status().message(),
      "kubeconfig " + bad_cluster + ": contexts[0].context.cluster: cluster \"foo\" not found");

  std::string bad_user = Write("bad-user", R"(
current-context: y
contexts:
- {name: x, context: {cluster: k, user: u}}
- {name: y, context: {cluster: k, user: missing}}
clusters: [{name: k, cluster: {server: http://a:1}}]
users: [{name: u, user: {}}]
)");
  config = LoadKubeconfig(bad_user);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            "kubeconfig " + bad_user + ": contexts[1].context.user: user \"missing\" not found");

  std::string missing_current = Write("no-current", "contexts: []\n");
  config = LoadKubeconfig(missing_current);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("current-context: not set"));

  std::string no_server = Write("no-server", R"(
current-context: x
contexts: [{name: x, context: {cluster: k}}]
clusters: [{name: k, cluster: {}}]
)");
  config = LoadKubeconfig(no_server);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("clusters[0].cluster.server: missing"));

  std::string bad_b64 = Write("bad-b64", R"(
current-context: x
contexts: [{name: x, context: {cluster: k}}]
clusters: [{name: k, cluster: {server: https://a, certificate-authority-data: "@@@"}}]
)");
  config = LoadKubeconfig(bad_b64);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("clusters[0].cluster.certificate-authority-data: not valid base64"));

  std::string missing_cert = Write("missing-cert", R"(
current-context: x
contexts: [{name: x, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: https://a}}]
users: [{name: u, user: {client-certificate: nope.crt, client-key: nope.key}}]
)");
  config = LoadKubeconfig(missing_cert);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("users[0].user.client-certificate: cannot read " + dir_.File("nope.crt")));

  std::string exec_user = Write("exec", R"(
current-context: x
contexts: [{name: x, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: https://a}}]
users: [{name: u, user: {exec: {command: aws}}}]
)");
  config = LoadKubeconfig(exec_user);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("users[0].user.exec: not supported"));
}

TEST_F(KubeconfigTest, MalformedYaml) {
  std::string path = Write("config", "contexts: [unclosed\n  - :\n");
  absl::StatusOr<ClusterConfig> config = LoadKubeconfig(path);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("kubeconfig " + path + ": not valid YAML"));

  config = LoadKubeconfig(Write("list", "- a\n- b\n"));
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("must be a mapping"));

  config = LoadKubeconfig(Write("contexts-map", "current-context: x\ncontexts: {x: 1}\n"));
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("contexts: must be a list"));

  config = LoadKubeconfig(dir_.File("does-not-exist"));
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("does-not-exist"));
}

// Sets environment variables for one test and restores them afterwards.
class ScopedEnv {
 public:
  void Set(const std::string& name, const char* value) {
    const char* old = std::getenv(name.c_str());
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value) {
      setenv(name.c_str(), value, 1);
    } else {
      unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) {
        setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        unsetenv(it->first.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(KubeconfigTest, InCluster) {
  Write("sa/token", "tok\n");
  Write("sa/ca.crt", "CA");
  Write("sa/namespace", "antdt-system\n");
  ScopedEnv env;
  env.Set("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  env.Set("KUBERNETES_SERVICE_PORT", "443");
  absl::StatusOr<ClusterConfig> config = InClusterConfig(dir_.File("sa"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->token_file, dir_.File("sa/token"));
  EXPECT_EQ(config->ca_file, dir_.File("sa/ca.crt"));
  EXPECT_EQ(config->namespace_, "antdt-system");

  env.Set("KUBERNETES_SERVICE_HOST", "fd00::1");
  config = InClusterConfig(dir_.File("sa"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://[fd00::1]:443");

  config = InClusterConfig(dir_.File("no-such-sa"));
  EXPECT_FALSE(config.ok());

  env.Set("KUBERNETES_SERVICE_PORT", nullptr);
  config = InClusterConfig(dir_.File("sa"));
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(KubeconfigTest, ResolveOrder) {
  std::string flag_file = Write("flag", kTwoContexts);
  std::string env_file = Write("env", R"(
current-context: x
contexts: [{name: x, context: {cluster: k}}]
clusters: [{name: k, cluster: {server: http://from-env:1}}]
)");
  Write("home/.kube/config", R"(
current-context: x
contexts: [{name: x, context: {cluster: k}}]
clusters: [{name: k, cluster: {server: http://from-home:1}}]
)");
  ScopedEnv env;
  env.Set("KUBERNETES_SERVICE_HOST", nullptr);
  env.Set("KUBECONFIG", (dir_.File("missing") + ":" + env_file).c_str());
  env.Set("HOME", dir_.File("home").c_str());

  absl::StatusOr<ClusterConfig> config = ResolveConfig(flag_file);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "http://127.0.0.1:8080");

  config = ResolveConfig("");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "http://from-env:1");

  env.Set("KUBECONFIG", nullptr);
  config = ResolveConfig("");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "http://from-home:1");

  env.Set("HOME", dir_.File("nowhere").c_str());
  config = ResolveConfig("");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace antdt::kube
