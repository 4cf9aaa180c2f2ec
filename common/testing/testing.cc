#include "common/testing/testing.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/config.h"

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

absl::StatusOr<std::string> WriteExampleJob(const std::string& dir, const std::string& name,
                                            const std::string& records_line, int64_t records) {
  const std::string example = "examples/jobs/" + name + ".yaml";
  absl::StatusOr<std::string> job = ReadFile(SourcePath(example));
  if (!job.ok()) return job.status();
  const std::string scenario_line = "scenario: ../scenarios/" + name + ".yaml";
  for (const std::string& line : {records_line, scenario_line}) {
    if (job->find(line) == std::string::npos) {
      return absl::FailedPreconditionError(absl::StrCat(example, ": no line \"", line, "\""));
    }
  }
  const std::string scenario =
      std::filesystem::absolute(SourcePath("examples/scenarios/" + name + ".yaml")).string();
  const std::string path = dir + "/" + name + ".yaml";
  const absl::Status written = WriteFileAtomically(
      path, absl::StrReplaceAll(*job, {{records_line, absl::StrCat("records: ", records)},
                                       {scenario_line, "scenario: " + scenario}}));
  if (!written.ok()) return written;
  return path;
}

}  // namespace antdt::testing
