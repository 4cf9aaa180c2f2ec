#include "common/tls.h"

#include <grpcpp/security/auth_context.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/log.h"

namespace antdt {
namespace {

struct State {
  std::once_flag from_env;
  bool configured = false;
  TlsFiles files;
  TlsMaterial material;
};

State& GlobalState() {
  static State* state = new State();  // never destroyed: used by exiting threads
  return *state;
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const std::string& field,
                                    absl::string_view must_hold, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", path, ": cannot be read"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  if (!absl::StrContains(text, must_hold)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", path, ": not a PEM ", what));
  }
  return text;
}

absl::StatusOr<TlsMaterial> Load(const TlsFiles& files) {
  TlsMaterial m;
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(files.cert.empty() ? "tls-cert: required with tls-key"
                                                         : "tls-key: required with tls-cert");
  }
  if (!files.cert.empty()) {
    auto cert = ReadPem(files.cert, "tls-cert", "-----BEGIN CERTIFICATE-----", "certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(files.key, "tls-key", "PRIVATE KEY-----", "private key");
    if (!key.ok()) return key.status();
    m.cert_pem = *std::move(cert);
    m.key_pem = *std::move(key);
  }
  if (!files.ca.empty()) {
    auto ca = ReadPem(files.ca, "tls-ca", "-----BEGIN CERTIFICATE-----", "CA certificate");
    if (!ca.ok()) return ca.status();
    m.ca_pem = *std::move(ca);
  }
  return m;
}

void Export(const char* name, const std::string& value) {
  if (value.empty()) {
    unsetenv(name);
  } else {
    setenv(name, value.c_str(), 1);
  }
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

TlsFiles FilesFromEnvironment() {
  return {Env(kEnvTlsCert), Env(kEnvTlsKey), Env(kEnvTlsCa), Env(kEnvTlsServerName)};
}

}  // namespace

const std::vector<std::string>& TlsFlagNames() {
  static const std::vector<std::string> names = {"tls-cert", "tls-key", "tls-ca",
                                                 "tls-server-name"};
  return names;
}

absl::Status ConfigureProcessTls(const TlsFiles& files) {
  absl::StatusOr<TlsMaterial> material = Load(files);
  if (!material.ok()) return material.status();
  State& state = GlobalState();
  std::call_once(state.from_env, [] {});  // the environment is not read after this
  state.files = files;
  state.material = *std::move(material);
  state.configured = true;
  Export(kEnvTlsCert, files.cert);
  Export(kEnvTlsKey, files.key);
  Export(kEnvTlsCa, files.ca);
  Export(kEnvTlsServerName, files.server_name);
  return absl::OkStatus();
}

absl::Status ConfigureTlsFromFlags(ParsedFlags& flags) {
  TlsFiles files = FilesFromEnvironment();
  auto take = [&flags](const std::string& name, std::string& out) {
    if (!flags.Has(name)) return;
    out = flags.Get(name);
    flags.values.erase(name);
  };
  take("tls-cert", files.cert);
  take("tls-key", files.key);
  take("tls-ca", files.ca);
  take("tls-server-name", files.server_name);
  return ConfigureProcessTls(files);
}

const TlsFiles& ProcessTls() {
  State& state = GlobalState();
  std::call_once(state.from_env, [&state] {
    state.files = FilesFromEnvironment();
    absl::StatusOr<TlsMaterial> material = Load(state.files);
    if (material.ok()) {
      state.material = *std::move(material);
    } else {
      // On, with nothing to trust: no plaintext fallback.
      LogEvent("tls_unusable", {{"error", std::string(material.status().message())}});
    }
    state.configured = true;
  });
  return state.files;
}

const TlsMaterial& ProcessTlsMaterial() {
  ProcessTls();
  return GlobalState().material;
}

bool TlsServing() { return !ProcessTls().cert.empty(); }
bool TlsDialing() { return ProcessTls().on(); }
bool TlsVerifiesClients() { return TlsServing() && !ProcessTls().ca.empty(); }

std::shared_ptr<grpc::ServerCredentials> ServerCredentials() {
  if (!TlsServing()) return grpc::InsecureServerCredentials();
  const TlsMaterial& m = ProcessTlsMaterial();
  grpc::SslServerCredentialsOptions options(m.ca_pem.empty()
                                                ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = m.ca_pem;
  options.pem_key_cert_pairs.push_back({m.key_pem, m.cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const std::string& target) {
  if (!TlsDialing() || absl::StartsWith(target, "unix:")) {
    return grpc::InsecureChannelCredentials();
  }
  const TlsMaterial& m = ProcessTlsMaterial();
  grpc::SslCredentialsOptions options;
  // An empty bundle would mean the system's roots: a CA that failed to load
  // must not widen trust, so it is replaced by one that matches nothing.
  options.pem_root_certs =
      m.ca_pem.empty() && !ProcessTls().ca.empty()
          ? std::string("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
          : m.ca_pem;
  options.pem_private_key = m.key_pem;
  options.pem_cert_chain = m.cert_pem;
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target,
                                             grpc::ChannelArguments args) {
  const std::string& name = ProcessTls().server_name;
  if (!name.empty() && TlsDialing() && !absl::StartsWith(target, "unix:")) {
    args.SetSslTargetNameOverride(name);
  }
  return grpc::CreateCustomChannel(target, ChannelCredentials(target), args);
}

std::vector<std::string> PeerCertificateNames(const grpc::ServerContext& context) {
  std::vector<std::string> names;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return names;
  for (const char* property : {"x509_common_name", "x509_subject_alternative_name"}) {
    for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
      names.emplace_back(value.data(), value.size());
    }
  }
  return names;
}

}  // namespace antdt
