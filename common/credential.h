// A job's credential: a bearer token that every call to the job's sharding
// service carries in its "authorization" metadata ("Bearer <token>"). The
// service holds the job's token and refuses a call without one
// (UNAUTHENTICATED) or with another (PERMISSION_DENIED). Workers find theirs
// in the environment, so a trainer needs no code for it: $ANTDT_TOKEN, or
// the file $ANTDT_TOKEN_FILE names (a mounted Secret). The operator gives
// each job a Secret holding DeriveToken(its key, the job's UID); the local
// runner a RandomToken() per run. Tokens are never logged.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace antdt {

inline constexpr char kEnvToken[] = "ANTDT_TOKEN";
inline constexpr char kEnvTokenFile[] = "ANTDT_TOKEN_FILE";
inline constexpr char kAuthorizationMetadata[] = "authorization";

// The one check every token passes, from a file or a variable: surrounding
// whitespace trimmed, then an error naming `source` when it is blank, longer
// than 4 KiB (a gRPC header carries 8 KiB in all) or holds other than visible
// ASCII (a newline, a control or non-ASCII byte: no gRPC client can send it).
// The token itself is never in the message.
absl::StatusOr<std::string> CheckToken(absl::string_view raw, absl::string_view source);
// The token in the file at `path` (CheckToken), the error naming `field` and
// the path; an error too when it cannot be read.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, absl::string_view field);
// $ANTDT_TOKEN (when set and not empty), else the token in the file
// $ANTDT_TOKEN_FILE names, else "" (none configured); both through CheckToken,
// so a blank or malformed one is an error naming the variable.
absl::StatusOr<std::string> TokenFromEnvironment();
// 32 random bytes, hex.
std::string RandomToken();
// HMAC-SHA256(key, subject), hex: the same token for the same job from any
// replica of the operator that holds the key.
std::string DeriveToken(absl::string_view key, absl::string_view subject);

// Adds the token to a call (nothing when it is empty).
void AddCredential(grpc::ClientContext& context, const std::string& token);
// SHA-256 of a token (32 raw bytes): what travels beyond the first hop.
std::string TokenDigest(absl::string_view token);
// TokenDigest of the bearer token a call carried, "" when it carried none.
std::string CredentialDigestOf(const grpc::ServerContext& context);
// Whether two digests are equal, in constant time (false when either is empty).
bool DigestsMatch(absl::string_view a, absl::string_view b);

// The server side: checks a call's credential against the job's token.
class TokenCheck {
 public:
  TokenCheck() = default;  // off: every call passes
  explicit TokenCheck(std::string token) : token_(std::move(token)) {}
  bool enabled() const { return !token_.empty(); }
  // OK, UNAUTHENTICATED (no credential) or PERMISSION_DENIED (not the job's);
  // compared in constant time.
  grpc::Status Check(const grpc::ServerContextBase& context) const;

 private:
  std::string token_;
};

}  // namespace antdt
