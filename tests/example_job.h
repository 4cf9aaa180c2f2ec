// An example job (examples/jobs/NAME.yaml) with another record count, for
// tests that run it: written into a test's directory with its scenario by
// absolute path.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "common/config.h"
#include "common/testing/testing.h"

namespace antdt::testing {

// The file's text; empty when it cannot be read (the test then fails saying so).
inline std::string ReadText(const std::string& path) { return ReadFile(path).value_or(""); }

// examples/jobs/NAME.yaml with `records` records in place of `records_line`;
// fails the test when the example no longer has the lines replaced.
inline std::string SmallJob(const TempDir& dir, const std::string& name,
                            const std::string& records_line, int64_t records) {
  const absl::StatusOr<std::string> path = WriteExampleJob(dir.path(), name, records_line, records);
  EXPECT_TRUE(path.ok()) << path.status();
  return path.value_or("");
}

}  // namespace antdt::testing
