#include "common/testing/testing.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace antdt::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/antdt-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) std::abort();
  path_ = buf.data();
}

TempDir::~TempDir() {
  if (std::getenv("ANTDT_KEEP_TEST_DIRS") != nullptr) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string BinPath(const std::string& name) {
  const char* dir = std::getenv("ANTDT_BIN_DIR");
  return std::string(dir ? dir : "build/bin") + "/" + name;
}

std::string SourcePath(const std::string& relative) {
  const char* dir = std::getenv("ANTDT_SOURCE_DIR");
  return std::string(dir ? dir : ".") + "/" + relative;
}

}  // namespace antdt::testing
