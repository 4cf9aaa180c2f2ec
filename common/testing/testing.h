// Test helpers: temporary directories and paths of the built binaries.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/process.h"

namespace antdt::testing {

using antdt::HttpGet;
using antdt::Process;
using antdt::ReadyFileField;
using antdt::WaitFor;
using antdt::WaitForReadyFile;

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The path of a built binary (tests get ANTDT_BIN_DIR from CTest).
std::string BinPath(const std::string& name);
std::string SourcePath(const std::string& relative);

// examples/jobs/NAME.yaml with `records` records in place of its line
// `records_line` and its scenario by absolute path, written as DIR/NAME.yaml:
// the path. An error names the line the example no longer has.
absl::StatusOr<std::string> WriteExampleJob(const std::string& dir, const std::string& name,
                                            const std::string& records_line, int64_t records);

}  // namespace antdt::testing
