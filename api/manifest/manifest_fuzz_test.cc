// A bounded random-input test of the manifest and scenario parsers (issue 14,
// item 3): thousands of mutations of the examples, to the tree (a value
// replaced by a hostile one, a key removed or added) and to the bytes (flips,
// NULs, cuts), from a fixed seed. Each answer is either a job that keeps the
// parser's promises or an InvalidArgument that names a field; never a crash,
// an exception or another code. Runs under ASan in CI (scripts/sanitize.sh).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/manifest/manifest.h"
#include "common/config.h"

namespace antdt::manifest {
namespace {

constexpr int kIterations = 4000;

std::string Source(const std::string& relative) {
  const char* dir = std::getenv("ANTDT_SOURCE_DIR");  // set by CTest
  EXPECT_NE(dir, nullptr) << "ANTDT_SOURCE_DIR is not set: run the test under ctest";
  absl::StatusOr<std::string> text = ReadFile(std::string(dir ? dir : ".") + "/" + relative);
  EXPECT_TRUE(text.ok()) << relative << ": " << text.status();
  return text.ok() ? *text : "";
}

// Values a tenant could put anywhere.
std::vector<std::string> HostileValues() {
  return {"-1",
          "0",
          "1",
          "2147483648",
          "9223372036854775807",
          "9223372036854775808",
          "-9223372036854775809",
          "18446744073709551616",
          "1e308",
          "1e309",
          "-0.0",
          ".nan",
          ".inf",
          "-.inf",
          "true",
          "\"\"",
          "~",
          "[]",
          "{}",
          "[1, [2, [3, [4]]]]",
          "{a: {b: {c: {}}}}",
          "\"a\\0b\"",
          "\"\\x01\\x7f\"",
          "\"" + std::string(70, 'a') + "\"",
          "\"" + std::string(100000, 'x') + "\"",
          "\"-1s\"",
          "\"9999999999999h\"",
          "\"0.0000001us\"",
          "\"ADJUST_BS\"",
          "\"custom\"",
          "&a [*a]",
          "!!binary AAAA"};
}

// The nodes of a YAML tree, in document order, to a depth (an alias can make
// a cycle: `&a [*a]`).
void Collect(YAML::Node node, std::vector<YAML::Node>* out, int depth = 0) {
  out->push_back(node);
  if (depth >= 16) return;
  if (node.IsMap()) {
    for (auto it = node.begin(); it != node.end(); ++it) Collect(it->second, out, depth + 1);
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) Collect(node[i], out, depth + 1);
  }
}

// One structure-aware mutation of `text`, or "" when it does not parse.
std::string MutateTree(const std::string& text, std::mt19937_64& rng) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception&) {
    return "";
  }
  std::vector<YAML::Node> nodes;
  Collect(root, &nodes);
  static const std::vector<std::string> values = HostileValues();
  for (int n = 1 + static_cast<int>(rng() % 3); n > 0; --n) {
    YAML::Node target = nodes[rng() % nodes.size()];
    if (!target.IsMap() || target.size() == 0) continue;
    auto it = target.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(rng() % target.size()));
    const std::string key = it->first.as<std::string>("?");
    switch (rng() % 4) {
      case 0:
        target.remove(key);
        break;
      case 1:
        target["unknownField" + std::to_string(rng() % 3)] =
            YAML::Load(values[rng() % values.size()]);
        break;
      default:
        target[key] = YAML::Load(values[rng() % values.size()]);
    }
  }
  YAML::Emitter out;
  out << root;
  return out.c_str();
}

// One byte-level mutation of `text`.
std::string MutateBytes(std::string text, std::mt19937_64& rng) {
  if (text.empty()) return text;
  switch (rng() % 5) {
    case 0:  // flip a few bytes
      for (int i = 0; i < 4; ++i) text[rng() % text.size()] = static_cast<char>(rng() % 256);
      break;
    case 1:  // a NUL
      text[rng() % text.size()] = '\0';
      break;
    case 2:  // cut
      text.resize(rng() % text.size());
      break;
    case 3:  // deep nesting
      text.insert(rng() % text.size(), std::string(5000, '['));
      break;
    default:  // a second document, or tabs where YAML forbids them
      text += rng() % 2 ? "\n---\nkind: AntDTJob\n" : "\n\tspec: {}\n";
  }
  return text;
}

// The promises a job that parses keeps.
void CheckJob(const Job& job, const std::string& input) {
  SCOPED_TRACE(input.substr(0, 2000));
  ASSERT_FALSE(job.name.empty());
  for (char c : job.name) {
    ASSERT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-') << job.name;
  }
  ASSERT_LE(job.name.size(), 63u);
  EXPECT_GE(job.workers.replicas, 1);
  EXPECT_GE(job.parameter_servers.replicas, 0);
  EXPECT_GE(job.dataset.records, 1);
  EXPECT_GE(job.dataset.shard_size, 1);
  EXPECT_GE(job.dataset.epochs, 1);
  EXPECT_GE(job.model.global_batch_size, job.workers.replicas);
  EXPECT_GE(job.run_policy.backoff_limit, 0);
}

// Either a job or InvalidArgument "<field>: <why>".
void CheckAnswer(const absl::StatusOr<Job>& job, const std::string& input) {
  if (job.ok()) {
    CheckJob(*job, input);
    return;
  }
  ASSERT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << job.status() << "\n"
                                                                     << input.substr(0, 2000);
  const std::string message(job.status().message());
  EXPECT_NE(message.find(": "), std::string::npos) << message;
}

TEST(ManifestFuzzTest, EveryMutationIsAJobOrAnErrorNamingAField) {
  std::vector<std::string> seeds = {
      Source("examples/jobs/quickstart.yaml"),    Source("examples/jobs/paper-mix.yaml"),
      Source("examples/jobs/heterogeneous.yaml"), Source("examples/k8s/quickstart.yaml"),
      Source("examples/k8s/pytorch.yaml"),        Source("examples/pytorch/job.yaml")};
  std::mt19937_64 rng(20261201);
  int parsed = 0, refused = 0;
  for (int i = 0; i < kIterations; ++i) {
    const std::string& seed = seeds[static_cast<size_t>(i) % seeds.size()];
    std::string input = rng() % 3 == 0 ? MutateBytes(seed, rng) : MutateTree(seed, rng);
    if (rng() % 4 == 0) input = MutateTree(input, rng);
    absl::StatusOr<Job> job = [&]() -> absl::StatusOr<Job> {
      try {
        return ParseJob(input);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "ParseJob threw " << e.what() << "\n" << input.substr(0, 2000);
        return absl::InternalError("threw");
      }
    }();
    CheckAnswer(job, input);
    (job.ok() ? parsed : refused)++;
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Both sides were exercised (the mutations are not all fatal, nor all harmless).
  EXPECT_GT(parsed, kIterations / 20);
  EXPECT_GT(refused, kIterations / 4);
  std::cout << "ParseJob: " << parsed << " parsed, " << refused << " refused, of " << kIterations
            << "\n";
}

TEST(ManifestFuzzTest, ScenarioMutationsAreAScenarioOrAnErrorNamingAField) {
  std::vector<std::string> seeds = {Source("examples/scenarios/quickstart.yaml"),
                                    Source("examples/scenarios/paper-mix.yaml"),
                                    Source("examples/scenarios/heterogeneous.yaml"),
                                    Source("examples/scenarios/pytorch-cpu-quota.yaml")};
  std::mt19937_64 rng(7);
  int refused = 0;
  for (int i = 0; i < kIterations / 2; ++i) {
    const std::string& seed = seeds[static_cast<size_t>(i) % seeds.size()];
    const std::string input = rng() % 3 == 0 ? MutateBytes(seed, rng) : MutateTree(seed, rng);
    try {
      absl::StatusOr<Scenario> s = ParseScenario(input);
      if (s.ok()) continue;
      ++refused;
      ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
      EXPECT_NE(s.status().message().find(": "), std::string::npos) << s.status();
    } catch (const std::exception& e) {
      FAIL() << "ParseScenario threw " << e.what() << "\n" << input.substr(0, 2000);
    }
  }
  EXPECT_GT(refused, kIterations / 10);
}

// Documents built to hurt a YAML reader: deep nesting, alias cycles and
// billion-laughs expansion in the free-form templates, NULs in names.
TEST(ManifestFuzzTest, HostileDocumentsAreRefusedOrBounded) {
  const std::string head =
      "apiVersion: antdt.io/v1alpha1\nkind: AntDTJob\nmetadata: {name: demo}\n"
      "spec:\n  dataset: {records: 1000, shardSize: 100}\n  workers:\n    replicas: 2\n";
  std::string laughs = "    template:\n      metadata:\n        annotations:\n";
  laughs += "          l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i < 9; ++i) {
    laughs += absl::StrCat("          l", i, ": &l", i, " [");
    for (int j = 0; j < 10; ++j) laughs += absl::StrCat(j ? ", " : "", "*l", i - 1);
    laughs += "]\n";
  }
  const std::vector<std::string> documents = {
      head + "    template: " + std::string(100000, '[') + "\n",
      head + "    template: &t {spec: *t}\n", head + laughs,
      "apiVersion: antdt.io/v1alpha1\nkind: AntDTJob\nmetadata: {name: \"de\\0mo\"}\n"
      "spec: {dataset: {records: 1, shardSize: 1}, workers: {replicas: 1}}\n",
      std::string("apiVersion: antdt.io/v1alpha1\nkind: AntDTJob\nmetadata: {name: de") +
          std::string(1, '\0') + "mo}\n"};
  for (const std::string& doc : documents) {
    SCOPED_TRACE(doc.substr(0, 300));
    try {
      const absl::StatusOr<Job> job = ParseJob(doc);
      CheckAnswer(job, doc);
      if (job.ok()) {
        EXPECT_LT(job->workers.template_yaml.size(), 1u << 20);
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "ParseJob threw " << e.what();
    }
  }
}

}  // namespace
}  // namespace antdt::manifest
