// Field management (metadata.managedFields) and server-side apply, as the API
// server does them (kubernetes.io/docs/reference/using-api/server-side-apply):
// every write records which fields its manager set; an apply by one manager
// that would change a field another manager set is a conflict (409) unless
// forced, and fields an applier stops applying are removed when no one else
// manages them.
//
// Simplified where the emulator has no schemas: lists are atomic (a list is
// one field, as `x-kubernetes-list-type: atomic` makes it), so two managers
// changing different containers of a pod conflict on the whole list.
//
// Pure functions over JSON; thread-safe.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace antdt::kubeemu {

// A field: the object keys from the root ({"spec", "workers", "replicas"}).
using FieldPath = std::vector<std::string>;
using FieldSet = std::set<FieldPath>;

// ".spec.workers.replicas", as conflicts name fields.
std::string FieldPathString(const FieldPath& path);

// The fields a value sets: its leaves (scalars, lists, empty objects). Of
// metadata only labels, annotations, finalizers and ownerReferences count;
// apiVersion and kind never; status only when `with_status`.
FieldSet LeafFields(const nlohmann::json& object, bool with_status);

// FieldsV1 ({"f:spec": {"f:workers": {"f:replicas": {}}}}) and back.
nlohmann::json ToFieldsV1(const FieldSet& fields);
FieldSet FromFieldsV1(const nlohmann::json& fields_v1);

// Who writes, and how.
struct ManagedWrite {
  std::string manager;      // fieldManager, or the User-Agent's product
  bool apply = false;       // server-side apply (operation Apply), else Update
  std::string api_version;  // "antdt.io/v1alpha1"
  std::string subresource;  // "status" or ""
  std::string time;         // RFC 3339
  FieldSet applied;         // apply: the fields the configuration sets
};

// managedFields after a write that turned `before` (null on create) into
// `after` (status counts only for a write to the status subresource): an
// Update's manager gains the fields it changed, an Apply's
// manager owns exactly what it applied, and every other manager loses the
// fields that changed; entries left with no field are dropped. An entry's
// time changes only when its fields do.
nlohmann::json UpdateManagedFields(const nlohmann::json& managed, const nlohmann::json& before,
                                   const nlohmann::json& after, const ManagedWrite& write);

struct ApplyResult {
  nlohmann::json object;     // the live object with the configuration merged in
  nlohmann::json conflicts;  // StatusCauses (FieldManagerConflict); empty when none
  std::string message;       // "Apply failed with 1 conflict: conflict with ..."
};

// Merges an apply configuration into `live` ({} when creating) for
// `write.manager`: every field of the configuration is set; a field another
// manager set to a different value is a conflict unless `force` (which takes
// it over); fields this manager applied before and applies no more are
// removed when no other manager has them. `write.applied` must be
// LeafFields(config).
ApplyResult MergeApply(const nlohmann::json& live, const nlohmann::json& config,
                       const nlohmann::json& managed, const ManagedWrite& write, bool force);

}  // namespace antdt::kubeemu
