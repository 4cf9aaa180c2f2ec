#include "common/tls.h"

#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "common/config.h"
#include "common/process.h"
#include "common/serve.h"
#include "common/testing/testing.h"

namespace antdt {
namespace {

// grpc.health.v1.Health/Check over `channel`: the call's status.
grpc::Status HealthCheck(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::CompletionQueue cq;
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  auto call = stub.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  return status;
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    const std::string script = testing::SourcePath("scripts/make-certs.sh");
    ASSERT_EQ(std::system((script + " " + dir_->path() + " >/dev/null").c_str()), 0);
    other_ = new testing::TempDir();
    ASSERT_EQ(std::system((script + " " + other_->path() + " >/dev/null").c_str()), 0);
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete other_;
  }
  static std::string File(const std::string& name) { return dir_->File(name); }

  static testing::TempDir* dir_;
  static testing::TempDir* other_;  // another CA's certificates
};
testing::TempDir* TlsTest::dir_ = nullptr;
testing::TempDir* TlsTest::other_ = nullptr;

TEST_F(TlsTest, BadFilesAreRefusedNamingTheFlag) {
  auto message = [](const TlsFiles& files) {
    return std::string(ConfigureProcessTls(files).message());
  };
  EXPECT_EQ(message({File("server.crt"), "", "", ""}), "tls-key: required with tls-cert");
  EXPECT_EQ(message({"", File("server.key"), "", ""}), "tls-cert: required with tls-key");
  EXPECT_EQ(message({"/nonexistent.crt", File("server.key"), "", ""}),
            "tls-cert: /nonexistent.crt: cannot be read");
  EXPECT_EQ(message({File("server.key"), File("server.key"), "", ""}),
            "tls-cert: " + File("server.key") + ": not a PEM certificate");
  EXPECT_EQ(message({File("server.crt"), File("server.crt"), "", ""}),
            "tls-key: " + File("server.crt") + ": not a PEM private key");
  EXPECT_EQ(message({"", "", File("server.key"), ""}),
            "tls-ca: " + File("server.key") + ": not a PEM CA certificate");
  // Nothing was set: TLS stays as it was (off).
  EXPECT_FALSE(TlsServing());
  EXPECT_EQ(std::getenv(kEnvTlsCert), nullptr);
}

TEST_F(TlsTest, ServersSpeakOnlyTlsAndChannelsVerifyTheServer) {
  ASSERT_TRUE(ConfigureProcessTls(
                  {File("server.crt"), File("server.key"), File("ca.crt"), "antdt.internal"})
                  .ok());
  EXPECT_TRUE(TlsServing());
  EXPECT_EQ(std::string(std::getenv(kEnvTlsCa)), File("ca.crt"));  // for child processes

  auto serving = Serving::Start({"127.0.0.1:0", "", "127.0.0.1:0", nullptr, {}});
  ASSERT_TRUE(serving.ok()) << serving.status();
  const std::string address = (*serving)->address();

  // The process's own channel: TLS, the name checked against antdt.internal.
  EXPECT_TRUE(HealthCheck(CreateChannel(address)).ok());
  // A plaintext client gets nothing.
  EXPECT_EQ(
      HealthCheck(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())).error_code(),
      grpc::StatusCode::UNAVAILABLE);
  // A client trusting another CA refuses the server.
  grpc::SslCredentialsOptions other;
  other.pem_root_certs = *ReadFile(other_->File("ca.crt"));
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("antdt.internal");
  EXPECT_EQ(HealthCheck(grpc::CreateCustomChannel(address, grpc::SslCredentials(other), args))
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // The right CA but a name the certificate does not carry.
  grpc::SslCredentialsOptions right;
  right.pem_root_certs = *ReadFile(File("ca.crt"));
  grpc::ChannelArguments wrong_name;
  wrong_name.SetSslTargetNameOverride("someone-else.internal");
  EXPECT_EQ(HealthCheck(grpc::CreateCustomChannel(address, grpc::SslCredentials(right), wrong_name))
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);

  // The metrics endpoint: HTTPS with the same certificate; plain HTTP and a
  // client trusting another CA get nothing.
  const std::string metrics = (*serving)->metrics_address();
  for (int i = 0; i < 3; ++i) {  // one connection after another
    std::optional<std::string> scraped = HttpsGet(metrics, "/metrics", File("ca.crt"), "localhost");
    ASSERT_TRUE(scraped.has_value());
    EXPECT_TRUE(absl::StartsWith(*scraped, "HTTP/1.1 200")) << *scraped;
  }
  std::optional<std::string> health = HttpsGet(metrics, "/healthz", File("ca.crt"), "localhost");
  ASSERT_TRUE(health.has_value());
  EXPECT_TRUE(absl::StartsWith(*health, "HTTP/1.1 200")) << *health;
  EXPECT_FALSE(HttpsGet(metrics, "/metrics", other_->File("ca.crt"), "localhost").has_value());
  std::optional<std::string> plain = HttpGet(metrics, "/metrics");
  EXPECT_FALSE(plain.has_value() && absl::StrContains(*plain, "200")) << *plain;
}

}  // namespace
}  // namespace antdt
