#include "api/vocab/vocab.h"

#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <set>

namespace antdt::vocab {
namespace {

// Every value's Name parses back to it, and the names are distinct.
template <typename E>
void ExpectRoundTrips(const std::vector<E>& all, std::optional<E> (*parse)(absl::string_view)) {
  std::set<std::string> names;
  for (E value : all) {
    SCOPED_TRACE(Name(value));
    EXPECT_EQ(parse(Name(value)), value);
    EXPECT_TRUE(names.insert(Name(value)).second) << "a name given twice";
  }
}

TEST(VocabTest, NamesRoundTrip) {
  ExpectRoundTrips(AllPolicies(), &ParsePolicy);
  ExpectRoundTrips(AllRoles(), &ParseRole);
  ExpectRoundTrips(AllActionKinds(), &ParseActionKind);
  ExpectRoundTrips(AllSignals(), &ParseSignal);
  for (v1::StragglerClass c :
       {v1::HEALTHY, v1::LEADER, v1::DETERMINISTIC, v1::TRANSIENT, v1::PERSISTENT}) {
    EXPECT_EQ(ParseStragglerClass(Name(c)), c) << Name(c);
  }
}

TEST(VocabTest, TheNamesUsersSee) {
  EXPECT_EQ(PolicyNames(), "antdt-nd, antdt-dd, custom, none, backup-workers, lb-bsp");
  EXPECT_EQ(Names(AllRoles()), "worker, ps");
  EXPECT_EQ(Names(AllActionKinds()), "ADJUST_BS, KILL_RESTART, BACKUP_WORKERS");
  EXPECT_EQ(Names(AllSignals()), "score, self_score, class");
  EXPECT_EQ(Name(v1::TRANSIENT), "transient");
  EXPECT_EQ(Name(v1::HEALTHY), "healthy");
  EXPECT_EQ(Name(v1::STRAGGLER_CLASS_UNSPECIFIED), "-");
  EXPECT_EQ(KubernetesName(v1::PERSISTENT), "Persistent");
  EXPECT_EQ(KubernetesName(v1::LEADER), "Leader");
  EXPECT_EQ(KubernetesName(v1::HEALTHY), "");
  EXPECT_EQ(KubernetesName(v1::STRAGGLER_CLASS_UNSPECIFIED), "");
  EXPECT_EQ(CauseName(v1::CPU_CONTENTION), "CPU_CONTENTION");
  EXPECT_EQ(CauseName(v1::CAUSE_UNSPECIFIED), "UNKNOWN");
  EXPECT_EQ(CauseName(static_cast<v1::Cause>(999)), "UNKNOWN");
}

TEST(VocabTest, CauseReasonsAreCamelCaseAsKubernetesReasonsAre) {
  // A Node condition's reason (AntDTSlowNode): every cause has one, and each
  // is a valid condition reason (starts with a letter, letters only).
  for (int i = v1::Cause_MIN; i <= v1::Cause_MAX; ++i) {
    const std::string& reason = CauseReason(static_cast<v1::Cause>(i));
    ASSERT_FALSE(reason.empty());
    for (char c : reason) EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(c))) << reason;
  }
  EXPECT_EQ(CauseReason(v1::CPU_THROTTLING), "CPUThrottling");
  EXPECT_EQ(CauseReason(v1::IO_PRESSURE), "IOPressure");
  EXPECT_EQ(CauseReason(v1::CAUSE_UNKNOWN), "UnknownCause");
  EXPECT_EQ(CauseReason(v1::CAUSE_UNSPECIFIED), "UnknownCause");
}

TEST(VocabTest, CauseLabelsAreLowerCaseNames) {
  // Every cause the Monitor names, as metric labels carry it.
  const std::map<v1::Cause, std::string> want = {{v1::CPU_CONTENTION, "cpu_contention"},
                                                 {v1::CPU_THROTTLING, "cpu_throttling"},
                                                 {v1::MEMORY_PRESSURE, "memory_pressure"},
                                                 {v1::NETWORK, "network"},
                                                 {v1::GPU_THROTTLING, "gpu_throttling"},
                                                 {v1::IO_PRESSURE, "io_pressure"},
                                                 {v1::HARDWARE, "hardware"},
                                                 {v1::DATA_LOADING, "data_loading"},
                                                 {v1::CAUSE_UNKNOWN, "unknown"},
                                                 {v1::CAUSE_UNSPECIFIED, "unknown"}};
  for (int i = v1::Cause_MIN; i <= v1::Cause_MAX; ++i) {
    const auto cause = static_cast<v1::Cause>(i);
    ASSERT_TRUE(want.count(cause)) << v1::Cause_Name(cause) << " has no label in this test";
    EXPECT_EQ(CauseLabel(cause), want.at(cause)) << v1::Cause_Name(cause);
  }
  EXPECT_EQ(CauseLabel(static_cast<v1::Cause>(999)), "unknown");
  EXPECT_STREQ(kNoCauseLabel, "none");
}

TEST(VocabTest, UnknownNamesAreRejected) {
  // Exact names only: other cases, spaces and neighbours are typos.
  for (const char* name : {"", "antdt_nd", "ANTDT-ND", "antdt-nd ", "fast", "backup"}) {
    EXPECT_EQ(ParsePolicy(name), std::nullopt) << name;
  }
  EXPECT_EQ(ParseRole("chief"), std::nullopt);
  EXPECT_EQ(ParseRole("PS"), std::nullopt);
  EXPECT_EQ(ParseActionKind("adjust_bs"), std::nullopt);
  EXPECT_EQ(ParseActionKind("REBOOT"), std::nullopt);
  EXPECT_EQ(ParseSignal("cpu"), std::nullopt);
  EXPECT_EQ(ParseStragglerClass("Transient"), std::nullopt);
  EXPECT_EQ(ParseStragglerClass("-"), std::nullopt);
  EXPECT_EQ(ParseStragglerClass("slow"), std::nullopt);
}

TEST(VocabTest, ParseOneOfNamesTheFieldAndTheChoices) {
  EXPECT_EQ(*ParseOneOf("x", "lb-bsp", AllPolicies()), Policy::kLbBsp);
  const absl::StatusOr<Policy> bad = ParseOneOf("spec.stragglerPolicy.name", "fast", AllPolicies());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "spec.stragglerPolicy.name: must be one of antdt-nd, antdt-dd, custom, none, "
            "backup-workers, lb-bsp, got \"fast\"");
  // A subset: BACKUP_WORKERS is a name, but not one of these.
  const std::vector<ActionKind> rule_actions = {ActionKind::kAdjustBatchSize,
                                                ActionKind::kKillRestart};
  EXPECT_EQ(ParseOneOf("a", "BACKUP_WORKERS", rule_actions).status().message(),
            "a: must be one of ADJUST_BS, KILL_RESTART, got \"BACKUP_WORKERS\"");
}

TEST(VocabTest, ParseOneOfSuggestsANearName) {
  EXPECT_EQ(ParseOneOf("--policy", "antdt-ndd", AllPolicies()).status().message(),
            "--policy: must be one of antdt-nd, antdt-dd, custom, none, backup-workers, lb-bsp, "
            "got \"antdt-ndd\"; did you mean \"antdt-nd\"?");
  EXPECT_EQ(ParseOneOf("r", "adjust_bs", AllActionKinds()).status().message(),
            "r: must be one of ADJUST_BS, KILL_RESTART, BACKUP_WORKERS, got \"adjust_bs\"; did you "
            "mean \"ADJUST_BS\"?");
  // Only the allowed names are suggested.
  EXPECT_EQ(ParseOneOf("a", "BACKUP_WORKER", RuleActionKinds()).status().message(),
            "a: must be one of ADJUST_BS, KILL_RESTART, got \"BACKUP_WORKER\"");
}

TEST(VocabTest, IsStraggler) {
  EXPECT_TRUE(IsStraggler(v1::TRANSIENT));
  EXPECT_TRUE(IsStraggler(v1::PERSISTENT));
  EXPECT_TRUE(IsStraggler(v1::DETERMINISTIC));
  EXPECT_FALSE(IsStraggler(v1::LEADER));
  EXPECT_FALSE(IsStraggler(v1::HEALTHY));
  EXPECT_FALSE(IsStraggler(v1::STRAGGLER_CLASS_UNSPECIFIED));
}

TEST(VocabTest, Median) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3}), 3);
  EXPECT_EQ(Median({5, 1, 3}), 3);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(Median({2, 2, 1, 9}), 2);
}

TEST(VocabTest, MemberIdsAreTypedAndParsedWhole) {
  EXPECT_EQ(MemberName(Role::kWorker, 3), "worker-3");
  EXPECT_EQ(MemberName(MemberId{Role::kParameterServer, 0}), "ps-0");
  EXPECT_EQ(ParseMemberId("worker-12"), (MemberId{Role::kWorker, 12}));
  EXPECT_EQ(ParseMemberId("ps-1"), (MemberId{Role::kParameterServer, 1}));
  for (const char* bad : {"worker-", "ps-", "worker-01", "worker--1", "worker-+1", "ps-1x", "w-1",
                          "worker-99999999999", "", "ps-1 ", "pod-1"}) {
    EXPECT_FALSE(ParseMemberId(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace antdt::vocab
