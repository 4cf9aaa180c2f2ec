#include "testing/kube-emulator/managed_fields.h"

#include <algorithm>
#include <functional>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace antdt::kubeemu {
namespace {

using json = nlohmann::json;

bool TrackedMetadata(const std::string& key) {
  return key == "labels" || key == "annotations" || key == "finalizers" || key == "ownerReferences";
}

void Leaves(const json& v, FieldPath& path, FieldSet* out) {
  if (v.is_object() && !v.empty()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      path.push_back(it.key());
      Leaves(*it, path, out);
      path.pop_back();
    }
  } else {
    out->insert(path);
  }
}

const json* At(const json& v, const FieldPath& path) {
  const json* at = &v;
  for (const std::string& key : path) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

void Set(json& v, const FieldPath& path, const json& value) {
  json* at = &v;
  for (const std::string& key : path) {
    if (!at->is_object()) *at = json::object();
    at = &(*at)[key];
  }
  // An empty object claims the object, not its emptiness.
  if (value.is_object() && value.empty() && at->is_object()) return;
  *at = value;
}

void Erase(json& v, const FieldPath& path) {
  if (path.empty()) return;
  json* at = &v;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (!at->is_object() || !at->contains(path[i])) return;
    at = &(*at)[path[i]];
  }
  if (at->is_object()) at->erase(path.back());
}

// One is the other or inside it: setting either changes the other.
bool Related(const FieldPath& a, const FieldPath& b) {
  const size_t n = std::min(a.size(), b.size());
  return std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin());
}

bool Touches(const FieldSet& set, const FieldPath& path) {
  return std::any_of(set.begin(), set.end(), [&](const FieldPath& p) { return Related(p, path); });
}

bool SameValue(const json* have, const json& want) {
  if (have == nullptr) return false;
  if (want.is_object() && want.empty()) return have->is_object();
  return *have == want;
}

struct Entry {
  json meta;  // everything but fieldsV1
  FieldSet fields;
  bool changed = false;

  std::string Manager() const { return meta.value("manager", ""); }
  bool Apply() const { return meta.value("operation", "") == "Apply"; }
  std::string Subresource() const { return meta.value("subresource", ""); }
  bool Is(const ManagedWrite& w) const {
    return Manager() == w.manager && Apply() == w.apply && Subresource() == w.subresource;
  }
  // As conflicts name a manager: "m", "m" with subresource "status",
  // "m" using v1 at TIME (an Update).
  std::string Printed() const {
    std::string out = absl::StrCat("\"", Manager(), "\"");
    if (!Subresource().empty()) absl::StrAppend(&out, " with subresource \"", Subresource(), "\"");
    if (!Apply()) {
      absl::StrAppend(&out, " using ", meta.value("apiVersion", ""));
      if (!meta.value("time", "").empty()) absl::StrAppend(&out, " at ", meta.value("time", ""));
    }
    return out;
  }
};

std::vector<Entry> Parse(const json& managed) {
  std::vector<Entry> out;
  if (!managed.is_array()) return out;
  for (const json& m : managed) {
    if (!m.is_object()) continue;
    Entry e;
    e.meta = m;
    e.meta.erase("fieldsV1");
    e.fields = FromFieldsV1(m.value("fieldsV1", json::object()));
    out.push_back(std::move(e));
  }
  return out;
}

json Render(const std::vector<Entry>& entries) {
  json out = json::array();
  for (const Entry& e : entries) {
    if (e.fields.empty()) continue;
    json m = e.meta;
    m["fieldsType"] = "FieldsV1";
    m["fieldsV1"] = ToFieldsV1(e.fields);
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

std::string FieldPathString(const FieldPath& path) { return "." + absl::StrJoin(path, "."); }

FieldSet LeafFields(const json& object, bool with_status) {
  FieldSet out;
  if (!object.is_object()) return out;
  FieldPath path;
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& key = it.key();
    if (key == "apiVersion" || key == "kind" || (key == "status" && !with_status)) continue;
    if (key == "metadata") {
      if (!it->is_object()) continue;
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!TrackedMetadata(m.key())) continue;
        path = {"metadata", m.key()};
        Leaves(*m, path, &out);
      }
      continue;
    }
    path = {key};
    Leaves(*it, path, &out);
  }
  return out;
}

json ToFieldsV1(const FieldSet& fields) {
  json out = json::object();
  for (const FieldPath& path : fields) {
    json* at = &out;
    for (const std::string& key : path) at = &(*at)["f:" + key];
    if (!at->is_object()) *at = json::object();
  }
  return out;
}

FieldSet FromFieldsV1(const json& fields_v1) {
  FieldSet out;
  FieldPath path;
  std::function<void(const json&)> walk = [&](const json& node) {
    bool member = node.empty() || node.contains(".");
    if (member && !path.empty()) out.insert(path);
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (it.key().rfind("f:", 0) != 0 || !it->is_object()) continue;
      path.push_back(it.key().substr(2));
      walk(*it);
      path.pop_back();
    }
  };
  if (fields_v1.is_object()) walk(fields_v1);
  return out;
}

json UpdateManagedFields(const json& managed, const json& before, const json& after,
                         const ManagedWrite& write) {
  std::vector<Entry> entries = Parse(managed);
  // Status is the status subresource's: a write to the object itself does not
  // own it (what the API server's reset-fields strategies do).
  const bool with_status = write.subresource == "status";
  const FieldSet now = LeafFields(after, with_status);
  FieldSet changed;
  if (before.is_null()) {
    changed = now;
  } else {
    FieldSet all = LeafFields(before, with_status);
    all.insert(now.begin(), now.end());
    for (const FieldPath& p : all) {
      const json* a = At(before, p);
      const json* b = At(after, p);
      // An object that stayed one changed only where its fields did.
      if (a != nullptr && b != nullptr && a->is_object() && b->is_object()) continue;
      if ((a == nullptr) != (b == nullptr) || (a != nullptr && *a != *b)) changed.insert(p);
    }
  }
  Entry* mine = nullptr;
  for (Entry& e : entries) {
    if (e.Is(write)) {
      mine = &e;
      continue;
    }
    for (auto it = e.fields.begin(); it != e.fields.end();) {
      // Another manager keeps a field only while it is there, unchanged.
      if (At(after, *it) == nullptr || Touches(changed, *it)) {
        it = e.fields.erase(it);
        e.changed = true;
      } else {
        ++it;
      }
    }
  }
  FieldSet owned = write.apply ? write.applied : FieldSet{};
  if (!write.apply) {
    if (mine != nullptr) owned = mine->fields;
    for (const FieldPath& p : changed) {
      if (now.count(p)) owned.insert(p);
    }
    for (auto it = owned.begin(); it != owned.end();) {
      it = At(after, *it) == nullptr ? owned.erase(it) : std::next(it);
    }
  }
  if (mine == nullptr && !owned.empty()) {
    Entry e;
    e.meta = {{"manager", write.manager}, {"operation", write.apply ? "Apply" : "Update"}};
    if (!write.subresource.empty()) e.meta["subresource"] = write.subresource;
    entries.push_back(std::move(e));
    mine = &entries.back();
    mine->changed = true;
  }
  if (mine != nullptr && mine->fields != owned) {
    mine->fields = std::move(owned);
    mine->changed = true;
  }
  for (Entry& e : entries) {
    if (!e.changed) continue;
    if (&e == mine) e.meta["apiVersion"] = write.api_version;
    e.meta["time"] = write.time;
  }
  return Render(entries);
}

ApplyResult MergeApply(const json& live, const json& config, const json& managed,
                       const ManagedWrite& write, bool force) {
  ApplyResult r;
  r.object = live.is_object() ? live : json::object();
  r.conflicts = json::array();
  const std::vector<Entry> entries = Parse(managed);
  // Conflicts, by manager: the fields another manager set to something else.
  std::map<std::string, std::vector<std::string>> by_manager;
  size_t count = 0;
  for (const FieldPath& p : write.applied) {
    const json* want = At(config, p);
    if (want == nullptr || SameValue(At(live, p), *want)) continue;
    for (const Entry& e : entries) {
      if (e.Is(write) || !Touches(e.fields, p)) continue;
      r.conflicts.push_back({{"type", "FieldManagerConflict"},
                             {"message", "conflict with " + e.Printed()},
                             {"field", FieldPathString(p)}});
      by_manager[e.Printed()].push_back(FieldPathString(p));
      ++count;
    }
  }
  if (count > 0 && !force) {
    if (count == 1) {
      const auto& [who, paths] = *by_manager.begin();
      r.message = absl::StrCat("Apply failed with 1 conflict: conflict with ", who, ": ", paths[0]);
    } else {
      std::vector<std::string> lines;
      for (const auto& [who, paths] : by_manager) {
        lines.push_back("conflicts with " + who + ":");
        for (const std::string& p : paths) lines.push_back("- " + p);
      }
      r.message =
          absl::StrCat("Apply failed with ", count, " conflicts: ", absl::StrJoin(lines, "\n"));
    }
    return r;
  }
  r.conflicts = json::array();
  for (const FieldPath& p : write.applied) {
    if (const json* want = At(config, p)) Set(r.object, p, *want);
  }
  // What this manager applied before and applies no more goes, unless
  // another manager has it too.
  for (const Entry& e : entries) {
    if (!e.Is(write)) continue;
    for (const FieldPath& p : e.fields) {
      if (Touches(write.applied, p)) continue;
      const bool shared = std::any_of(entries.begin(), entries.end(), [&](const Entry& o) {
        return !o.Is(write) && Touches(o.fields, p);
      });
      if (!shared) Erase(r.object, p);
    }
  }
  return r;
}

}  // namespace antdt::kubeemu
