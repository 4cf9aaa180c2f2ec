#include "common/spelling.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace antdt {
namespace {

TEST(EditDistance, CountsEditsAndAdjacentSwapsWithoutCase) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("abc", ""), 3u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("replicas", "replicas"), 0u);
  EXPECT_EQ(EditDistance("replica", "replicas"), 1u);   // a deletion
  EXPECT_EQ(EditDistance("replcas", "replicas"), 1u);   // an insertion
  EXPECT_EQ(EditDistance("replixas", "replicas"), 1u);  // a substitution
  EXPECT_EQ(EditDistance("nmae", "name"), 1u);          // a swap of neighbours
  EXPECT_EQ(EditDistance("shardsize", "shardSize"), 0u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("ca", "abc"), 3u);  // optimal string alignment, not Damerau's unrestricted
  EXPECT_EQ(EditDistance("abc", "ca"), EditDistance("ca", "abc"));
}

TEST(NearestName, SuggestsOnlyANearName) {
  const std::vector<std::string> policies = {"antdt-nd", "antdt-dd",       "custom",
                                             "none",     "backup-workers", "lb-bsp"};
  EXPECT_EQ(NearestName("antdt-ndd", policies), "antdt-nd");  // 1 from nd, 2 from dd
  EXPECT_EQ(NearestName("ANTDT-DD", policies), "antdt-dd");
  EXPECT_EQ(NearestName("backup-worker", policies), "backup-workers");
  EXPECT_EQ(NearestName("nnoe", policies), "none");
  EXPECT_EQ(NearestName("fast", policies), std::nullopt);
  EXPECT_EQ(NearestName("", policies), std::nullopt);
  EXPECT_EQ(NearestName("antdt", policies), std::nullopt);  // 3 edits
  EXPECT_EQ(NearestName("none", policies), std::nullopt);   // a valid name: nothing to suggest
  EXPECT_EQ(NearestName("none", std::vector<std::string>{}), std::nullopt);
  // Short names take one edit at most; long ones two.
  EXPECT_EQ(NearestName("px", {"ps", "worker"}), "ps");
  EXPECT_EQ(NearestName("ab", {"ps", "worker"}), std::nullopt);
  EXPECT_EQ(NearestName("wrker", {"ps", "worker"}), "worker");
  EXPECT_EQ(NearestName("wrkr", {"ps", "worker"}), std::nullopt);
  EXPECT_EQ(NearestName("replca", {"replicas", "template"}), "replicas");
  EXPECT_EQ(NearestName("treshhold", {"threshold", "windows"}), "threshold");
  // Of equally near names, the first.
  EXPECT_EQ(NearestName("bat", {"cat", "hat"}), "cat");
}

TEST(DidYouMean, AppendsTheSuggestionOrNothing) {
  EXPECT_EQ(DidYouMean("replica", {"replicas", "template"}), "; did you mean \"replicas\"?");
  EXPECT_EQ(DidYouMean("polcy", {"policy", "report"}, "--"), "; did you mean \"--policy\"?");
  EXPECT_EQ(DidYouMean("zzz", {"policy", "report"}, "--"), "");
  EXPECT_EQ(DidYouMean("sped", std::vector<std::string>{"name", "speed"}),
            "; did you mean \"speed\"?");
}

}  // namespace
}  // namespace antdt
