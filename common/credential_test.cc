#include "common/credential.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <string>

#include "common/testing/testing.h"

namespace antdt {
namespace {

TEST(CredentialTest, DeriveTokenIsHmacSha256) {
  // RFC 4231, test case 2.
  EXPECT_EQ(DeriveToken("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_NE(DeriveToken("key", "uid-1"), DeriveToken("key", "uid-2"));
  EXPECT_NE(DeriveToken("key", "uid-1"), DeriveToken("other", "uid-1"));
}

TEST(CredentialTest, RandomTokensDiffer) {
  const std::string a = RandomToken();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, RandomToken());
}

TEST(CredentialTest, TokenFilesAreCheckedAndNamed) {
  testing::TempDir dir;
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir.File(name)) << content;
    return dir.File(name);
  };
  auto ok = ReadTokenFile(write("ok", "  s3cret-token\n"), "token_file");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "s3cret-token");
  for (const auto& [name, content] :
       std::vector<std::pair<std::string, std::string>>{{"empty", " \n"},
                                                        {"binary", std::string("a\0b", 3)},
                                                        {"long", std::string(5000, 'x')}}) {
    auto bad = ReadTokenFile(write(name, content), "token_file");
    ASSERT_FALSE(bad.ok()) << name;
    EXPECT_NE(bad.status().message().find("token_file: "), std::string::npos) << bad.status();
    EXPECT_EQ(bad.status().message().find(content), std::string::npos) << "the content is not said";
  }
  EXPECT_FALSE(ReadTokenFile(dir.File("missing"), "token_file").ok());
}

TEST(CredentialTest, TheEnvironmentGivesTheTokenOrItsFile) {
  testing::TempDir dir;
  unsetenv(kEnvToken);
  unsetenv(kEnvTokenFile);
  EXPECT_EQ(*TokenFromEnvironment(), "");
  std::ofstream(dir.File("t")) << "from-file\n";
  setenv(kEnvTokenFile, dir.File("t").c_str(), 1);
  EXPECT_EQ(*TokenFromEnvironment(), "from-file");
  setenv(kEnvToken, "from-env", 1);
  EXPECT_EQ(*TokenFromEnvironment(), "from-env");
  unsetenv(kEnvToken);
  setenv(kEnvTokenFile, dir.File("missing").c_str(), 1);
  EXPECT_FALSE(TokenFromEnvironment().ok());
  unsetenv(kEnvTokenFile);
}

// A variable gets the check a file gets: a blank one is an error, not "no
// token" (which turned authentication off), and so are tokens no gRPC client
// can send. The message names the variable, never the value.
TEST(CredentialTest, TheVariableIsCheckedLikeAFile) {
  unsetenv(kEnvTokenFile);
  for (const auto& [value, want] : std::vector<std::pair<std::string, std::string>>{
           {"   ", "$ANTDT_TOKEN is blank"},
           {"\t\n", "$ANTDT_TOKEN is blank"},
           {std::string(100 * 1024, 'x'), "$ANTDT_TOKEN holds more than 4096 bytes"},
           {"two\nlines", "$ANTDT_TOKEN holds other than visible ASCII"},
           {"sp ace", "$ANTDT_TOKEN holds other than visible ASCII"},
           {"caf\xc3\xa9", "$ANTDT_TOKEN holds other than visible ASCII"}}) {
    setenv(kEnvToken, value.c_str(), 1);
    auto got = TokenFromEnvironment();
    ASSERT_FALSE(got.ok()) << want;
    EXPECT_NE(got.status().message().find(want), std::string::npos) << got.status();
    if (value.size() > 3) {
      EXPECT_EQ(got.status().message().find(value), std::string::npos);
    }
  }
  setenv(kEnvToken, "  padded-token \n", 1);
  EXPECT_EQ(*TokenFromEnvironment(), "padded-token");
  unsetenv(kEnvToken);
  EXPECT_EQ(CheckToken(std::string(4096, 'a'), "x").value(), std::string(4096, 'a'));
  EXPECT_FALSE(CheckToken(std::string(4097, 'a'), "x").ok());
}

}  // namespace
}  // namespace antdt
