// Pod Security admission, as the API server's (the Pod Security Standards,
// kubernetes.io/docs/concepts/security/pod-security-standards): a namespace's
// label pod-security.kubernetes.io/enforce names a level; a pod that breaks
// it is refused with the checks it fails, in the API server's words:
//
//   pods "x" is forbidden: violates PodSecurity "restricted:latest":
//   allowPrivilegeEscalation != false (container "c" must set
//   securityContext.allowPrivilegeEscalation=false), ...
//
// The `warn` label (and `enforce` for workload templates) gives the same
// checks as Warning headers instead. Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace antdt::kubeemu {

enum class PodSecurityLevel { kPrivileged, kBaseline, kRestricted };

inline constexpr char kEnforceLabel[] = "pod-security.kubernetes.io/enforce";
inline constexpr char kWarnLabel[] = "pod-security.kubernetes.io/warn";

// "privileged", "baseline", "restricted"; nullopt for anything else.
std::optional<PodSecurityLevel> ParsePodSecurityLevel(const std::string& text);
std::string PodSecurityLevelName(PodSecurityLevel level);

// The checks `pod_spec` fails at `level` (baseline's and, for restricted,
// restricted's too), each as the API server words it; empty when it passes.
std::vector<std::string> PodSecurityViolations(PodSecurityLevel level,
                                               const nlohmann::json& pod_spec);

// `violates PodSecurity "restricted:latest": a, b` (empty for no violations).
std::string PodSecurityMessage(PodSecurityLevel level, const std::vector<std::string>& violations);

}  // namespace antdt::kubeemu
