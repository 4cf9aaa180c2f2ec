// TLS for every AntDT gRPC and metrics endpoint, from certificate files (so
// cert-manager, the Helm chart or openssl can provide them). One setting per
// process, for what it serves and what it dials:
//
//   --tls-cert FILE   $ANTDT_TLS_CERT   this process's certificate (PEM chain):
//                                       its servers speak TLS, and its
//                                       channels present it (mutual TLS)
//   --tls-key FILE    $ANTDT_TLS_KEY    that certificate's private key
//   --tls-ca FILE     $ANTDT_TLS_CA     the CA bundle that peers' certificates
//                                       must chain to; dialled servers are
//                                       verified against it, and a client
//                                       certificate, when one is sent, too
//   --tls-server-name $ANTDT_TLS_SERVER_NAME
//                                       the name every dialled server's
//                                       certificate must carry, for addresses
//                                       (pod IPs) that no certificate names
//
// TLS is on when a certificate or a CA is given; with neither, everything
// stays plaintext, as before. The flags are exported to the environment, so
// the processes a process starts (the local runner's) inherit them, and the
// trainer SDKs (C++ and Python) read the same variables with no code change.
// Unix sockets (a node agent's socket for its own node's workers) stay
// plaintext: the filesystem guards them.
//
// The files are read once, when the process's setting is made; a rotated
// certificate is used by a restarted process. Key material is never logged.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace antdt {

struct ParsedFlags;

inline constexpr char kEnvTlsCert[] = "ANTDT_TLS_CERT";
inline constexpr char kEnvTlsKey[] = "ANTDT_TLS_KEY";
inline constexpr char kEnvTlsCa[] = "ANTDT_TLS_CA";
inline constexpr char kEnvTlsServerName[] = "ANTDT_TLS_SERVER_NAME";

struct TlsFiles {
  std::string cert, key, ca, server_name;
  bool on() const { return !cert.empty() || !ca.empty(); }
};

// The --help text of the flags below, shared by every binary.
inline constexpr char kTlsFlagsUsage[] =
    R"(TLS (every flag also read from its variable; off when none is given):
  --tls-cert FILE             this process's certificate chain (PEM): its
                              servers speak TLS, its channels present it
                                                            [$ANTDT_TLS_CERT]
  --tls-key FILE              the certificate's private key  [$ANTDT_TLS_KEY]
  --tls-ca FILE               CA bundle that peers must chain to
                                                            [$ANTDT_TLS_CA]
  --tls-server-name NAME      name dialled servers' certificates must carry
                                                      [$ANTDT_TLS_SERVER_NAME]
)";

// The flag names ParseCommandLine accepts for every binary.
const std::vector<std::string>& TlsFlagNames();

// Sets this process's TLS from `files`, reading and checking them: an error
// names the flag and the path ("tls-key: /x: no such file", "tls-cert: not a
// PEM certificate", "tls-key: required with tls-cert"). Exports the setting
// to the environment for child processes. Call from main before threads.
absl::Status ConfigureProcessTls(const TlsFiles& files);
// The --tls-* flags (removed from `flags`), each falling back to its
// environment variable; then ConfigureProcessTls.
absl::Status ConfigureTlsFromFlags(ParsedFlags& flags);

// This process's setting: as configured, else from the environment at first
// use (a trainer linking the SDK). A file that cannot be read then leaves TLS
// on with nothing to trust, so connections fail rather than fall back to
// plaintext; the reason is logged once.
const TlsFiles& ProcessTls();
bool TlsServing();  // a certificate: servers speak TLS
bool TlsDialing();  // a certificate or CA: channels speak TLS
// A certificate and a CA: servers verify the client certificates sent (what
// mutual TLS, the Monitor's node identity, needs).
bool TlsVerifiesClients();

// Credentials for a server's TCP ports (insecure when TLS is off). With a CA,
// a client certificate is requested and verified when sent; none is required
// (health checks, workers), so a service that needs one checks
// PeerCertificateNames.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials();
// Credentials to dial `target`: TLS per ProcessTls, plaintext for unix:.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const std::string& target);
// A channel to `target` with ChannelCredentials and, when set, the server
// name to verify.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target,
                                             grpc::ChannelArguments args = {});

// The names a verified client certificate carries: its common name and DNS
// subject alternative names; empty when the peer sent none (or plaintext).
std::vector<std::string> PeerCertificateNames(const grpc::ServerContext& context);

// The PEM texts as read (for the metrics endpoint's TLS); empty when off.
struct TlsMaterial {
  std::string cert_pem, key_pem, ca_pem;
};
const TlsMaterial& ProcessTlsMaterial();

}  // namespace antdt
