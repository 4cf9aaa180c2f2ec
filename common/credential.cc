#include "common/credential.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace antdt {
namespace {

constexpr size_t kMaxTokenBytes = 4096;
constexpr absl::string_view kBearer = "Bearer ";

std::string Hex(const unsigned char* data, size_t size) {
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(data), size));
}

// The token of a call's "authorization: Bearer <token>", or nullopt when it
// carries none or another scheme.
std::optional<absl::string_view> BearerToken(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthorizationMetadata);
  if (it == metadata.end()) return std::nullopt;
  const absl::string_view value(it->second.data(), it->second.size());
  if (!absl::StartsWith(value, kBearer)) return std::nullopt;
  return value.substr(kBearer.size());
}

}  // namespace

absl::StatusOr<std::string> CheckToken(absl::string_view raw, absl::string_view source) {
  const std::string token(absl::StripAsciiWhitespace(raw));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(source, " is blank"));
  if (token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, " holds more than ", kMaxTokenBytes,
                                                   " bytes (what a gRPC header carries)"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, " holds other than visible ASCII on one line (no gRPC client can send it)"));
    }
  }
  return token;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, absl::string_view field) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(field, ": cannot read ", path));
  std::ostringstream content;
  content << in.rdbuf();
  return CheckToken(content.str(), absl::StrCat(field, ": ", path));
}

absl::StatusOr<std::string> TokenFromEnvironment() {
  if (const char* token = std::getenv(kEnvToken); token != nullptr && *token != '\0') {
    return CheckToken(token, absl::StrCat("$", kEnvToken));
  }
  if (const char* path = std::getenv(kEnvTokenFile); path != nullptr && *path != '\0') {
    return ReadTokenFile(path, absl::StrCat("$", kEnvTokenFile));
  }
  return std::string();
}

std::string RandomToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) std::abort();  // no entropy: nothing is safe
  return Hex(bytes, sizeof(bytes));
}

std::string DeriveToken(absl::string_view key, absl::string_view subject) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(subject.data()), subject.size(), mac, &size);
  return Hex(mac, size);
}

void AddCredential(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) context.AddMetadata(kAuthorizationMetadata, absl::StrCat(kBearer, token));
}

std::string TokenDigest(absl::string_view token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(token.data(), token.size(), digest, &size, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(digest), size);
}

std::string CredentialDigestOf(const grpc::ServerContext& context) {
  const std::optional<absl::string_view> token = BearerToken(context);
  return token && !token->empty() ? TokenDigest(*token) : "";
}

bool DigestsMatch(absl::string_view a, absl::string_view b) {
  return !a.empty() && a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

grpc::Status TokenCheck::Check(const grpc::ServerContextBase& context) const {
  if (token_.empty()) return grpc::Status::OK;
  if (!context.client_metadata().count(kAuthorizationMetadata)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "no credential: calls to this job's service carry the job's token "
                        "(\"authorization: Bearer <token>\"; the SDKs read $ANTDT_TOKEN or "
                        "$ANTDT_TOKEN_FILE)");
  }
  const absl::string_view given = BearerToken(context).value_or(absl::string_view());
  if (given.size() != token_.size() ||
      CRYPTO_memcmp(given.data(), token_.data(), token_.size()) != 0) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "the credential is not this job's token");
  }
  return grpc::Status::OK;
}

}  // namespace antdt
