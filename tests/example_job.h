// An example job (examples/jobs/NAME.yaml) with another record count, for
// tests that run it: written into a test's directory with its scenario by
// absolute path.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/config.h"
#include "common/testing/testing.h"

namespace antdt::testing {

// The file's text; empty when it cannot be read (the test then fails saying so).
inline std::string ReadText(const std::string& path) { return ReadFile(path).value_or(""); }

// examples/jobs/NAME.yaml with `records` records in place of `records_line`;
// fails the test when the example no longer has the lines replaced.
inline std::string SmallJob(const TempDir& dir, const std::string& name,
                            const std::string& records_line, int64_t records) {
  const std::string job = ReadText(SourcePath("examples/jobs/" + name + ".yaml"));
  const std::string scenario_line = "scenario: ../scenarios/" + name + ".yaml";
  EXPECT_NE(job.find(records_line), std::string::npos) << job;
  EXPECT_NE(job.find(scenario_line), std::string::npos) << job;
  const std::string small = absl::StrReplaceAll(
      job, {{records_line, absl::StrCat("records: ", records)},
            {scenario_line, "scenario: " + SourcePath("examples/scenarios/" + name + ".yaml")}});
  const std::string path = dir.File(name + ".yaml");
  EXPECT_TRUE(WriteFileAtomically(path, small).ok()) << path;
  return path;
}

}  // namespace antdt::testing
