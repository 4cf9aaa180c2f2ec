// The pure parts of the emulator's built-in workload controllers (what
// kube-controller-manager does for Deployments, ReplicaSets and DaemonSets):
// template hashes, owner references, pods from templates, which nodes a
// DaemonSet runs on, readiness. Thread-safe (pure functions).
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace antdt::kubeemu {

using json = nlohmann::json;

// The pod-template-hash label's value: stable for equal templates.
std::string PodTemplateHash(const json& pod_template);

// An ownerReference to `owner` (controller, blockOwnerDeletion).
json ControllerRef(const json& owner, const std::string& api_version, const std::string& kind);

// A pod from `pod_template` ({metadata, spec}) in `ns`, owned by `owner_ref`,
// named by `generate_name` + a suffix the API server picks (or `name`), with
// `extra_labels` added.
json PodFromTemplate(const json& pod_template, const std::string& ns, const json& owner_ref,
                     const std::string& name, const std::string& generate_name,
                     const json& extra_labels);

// Whether `pod` has condition Ready True and is not being deleted.
bool PodReady(const json& pod);

// Whether a DaemonSet pod with `pod_spec` belongs on `node`: the node matches
// its nodeSelector and required node affinity (matchExpressions on labels,
// matchFields on metadata.name), and it tolerates the node's NoSchedule and
// NoExecute taints.
bool DaemonPodFits(const json& pod_spec, const json& node);

// Whether `labels` match a LabelSelector (matchLabels, matchExpressions).
bool SelectorMatches(const json& selector, const json& labels);

}  // namespace antdt::kubeemu
