#include "testing/kube-emulator/managed_fields.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace antdt::kubeemu {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

ManagedWrite Write(const std::string& manager, bool apply, const json& config = json()) {
  ManagedWrite w;
  w.manager = manager;
  w.apply = apply;
  w.api_version = "test.antdt.io/v1";
  w.time = "2026-12-02T01:00:00Z";
  if (apply) w.applied = LeafFields(config, false);
  return w;
}

// The fields each manager holds, as ".a.b" strings, in managedFields order.
std::vector<std::string> Owned(const json& managed, const std::string& manager) {
  std::vector<std::string> out;
  for (const json& m : managed) {
    if (m["manager"] != manager) continue;
    for (const FieldPath& p : FromFieldsV1(m["fieldsV1"])) out.push_back(FieldPathString(p));
  }
  return out;
}

json Obj(const json& spec, const json& labels = json::object()) {
  return {{"apiVersion", "test.antdt.io/v1"},
          {"kind", "Widget"},
          {"metadata", {{"name", "w"}, {"uid", "u"}, {"labels", labels}}},
          {"spec", spec},
          {"status", {{"phase", "Running"}}}};
}

TEST(ManagedFieldsTest, FieldsV1RoundTripsAndLeavesSkipServerMetadata) {
  const json o = Obj({{"size", 1}, {"parts", {1, 2}}, {"empty", json::object()}}, {{"app", "a"}});
  const FieldSet leaves = LeafFields(o, false);
  std::vector<std::string> names;
  for (const FieldPath& p : leaves) names.push_back(FieldPathString(p));
  EXPECT_THAT(names,
              ElementsAre(".metadata.labels.app", ".spec.empty", ".spec.parts", ".spec.size"));
  EXPECT_EQ(ToFieldsV1(leaves), json::parse(R"({"f:metadata": {"f:labels": {"f:app": {}}},
      "f:spec": {"f:empty": {}, "f:parts": {}, "f:size": {}}})"));
  EXPECT_EQ(FromFieldsV1(ToFieldsV1(leaves)), leaves);
  EXPECT_EQ(LeafFields(o, true).count({"status", "phase"}), 1u);
}

TEST(ManagedFieldsTest, AnUpdateTakesTheFieldsItChangesFromOthers) {
  const json created = Obj({{"size", 1}, {"nodeName", "n"}}, {{"app", "a"}});
  json managed = UpdateManagedFields(json::array(), json(), created, Write("creator", false));
  EXPECT_THAT(Owned(managed, "creator"),
              ElementsAre(".metadata.labels.app", ".spec.nodeName", ".spec.size"));
  json next = created;
  next["spec"]["size"] = 2;
  next["metadata"]["labels"]["team"] = "t";  // a label beside another's
  managed = UpdateManagedFields(managed, created, next, Write("editor", false));
  EXPECT_THAT(Owned(managed, "creator"), ElementsAre(".metadata.labels.app", ".spec.nodeName"));
  EXPECT_THAT(Owned(managed, "editor"), ElementsAre(".metadata.labels.team", ".spec.size"));
  EXPECT_EQ(managed[1]["operation"], "Update");
  EXPECT_EQ(managed[1]["apiVersion"], "test.antdt.io/v1");
  // A write that changes nothing changes no entry, not even its time.
  EXPECT_EQ(UpdateManagedFields(managed, next, next, Write("editor", false)), managed);
  // The last field of a manager gone: its entry goes.
  json fewer = next;
  fewer["spec"].erase("nodeName");
  fewer["metadata"]["labels"].erase("app");
  managed = UpdateManagedFields(managed, next, fewer, Write("editor", false));
  EXPECT_THAT(Owned(managed, "creator"), IsEmpty());
  EXPECT_EQ(managed.size(), 1u);
}

TEST(ManagedFieldsTest, ApplyConflictsWithAnotherManagersValueUnlessForced) {
  const json config = Obj({{"size", 1}});
  json live = config;
  json managed = UpdateManagedFields(json::array(), json(), live, Write("applier", true, config));
  json edited = live;
  edited["spec"]["size"] = 5;
  managed = UpdateManagedFields(managed, live, edited, Write("kubectl-edit", false));

  ApplyResult r = MergeApply(edited, config, managed, Write("applier", true, config), false);
  EXPECT_EQ(r.message,
            "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using test.antdt.io/v1 "
            "at 2026-12-02T01:00:00Z: .spec.size");
  ASSERT_EQ(r.conflicts.size(), 1u);
  EXPECT_EQ(r.conflicts[0]["type"], "FieldManagerConflict");
  EXPECT_EQ(r.conflicts[0]["field"], ".spec.size");

  r = MergeApply(edited, config, managed, Write("applier", true, config), true);
  EXPECT_TRUE(r.message.empty());
  EXPECT_EQ(r.object["spec"]["size"], 1);
  managed = UpdateManagedFields(managed, edited, r.object, Write("applier", true, config));
  EXPECT_THAT(Owned(managed, "applier"), ElementsAre(".metadata.labels", ".spec.size"));
  EXPECT_THAT(Owned(managed, "kubectl-edit"), IsEmpty());
}

TEST(ManagedFieldsTest, ApplyingTheSameValueSharesAFieldAndDroppedFieldsGo) {
  const json mine = Obj({{"size", 1}, {"nodeName", "n"}, {"mode", "m"}});
  json managed = UpdateManagedFields(json::array(), json(), mine, Write("a", true, mine));
  // b applies the same nodeName: no conflict, both hold it.
  const json theirs = Obj({{"nodeName", "n"}});
  ApplyResult r = MergeApply(mine, theirs, managed, Write("b", true, theirs), false);
  ASSERT_TRUE(r.message.empty()) << r.message;
  managed = UpdateManagedFields(managed, mine, r.object, Write("b", true, theirs));
  EXPECT_THAT(Owned(managed, "b"), ElementsAre(".metadata.labels", ".spec.nodeName"));
  EXPECT_THAT(Owned(managed, "a"),
              ElementsAre(".metadata.labels", ".spec.mode", ".spec.nodeName", ".spec.size"));
  // a stops applying nodeName and mode: mode goes, nodeName stays (b has it).
  const json less = Obj({{"size", 1}});
  r = MergeApply(r.object, less, managed, Write("a", true, less), false);
  ASSERT_TRUE(r.message.empty()) << r.message;
  EXPECT_EQ(r.object["spec"], json({{"size", 1}, {"nodeName", "n"}}));
}

TEST(ManagedFieldsTest, SeveralConflictsAreListedByManager) {
  const json base = Obj({{"size", 1}, {"nodeName", "n"}, {"mode", "m"}});
  json managed = UpdateManagedFields(json::array(), json(), base, Write("x", false));
  const json config = Obj({{"size", 2}, {"nodeName", "o"}});
  ApplyResult r = MergeApply(base, config, managed, Write("y", true, config), false);
  EXPECT_THAT(r.message, HasSubstr("Apply failed with 2 conflicts: conflicts with \"x\" using "));
  EXPECT_THAT(r.message, HasSubstr(":\n- .spec.nodeName\n- .spec.size"));
}

}  // namespace
}  // namespace antdt::kubeemu
