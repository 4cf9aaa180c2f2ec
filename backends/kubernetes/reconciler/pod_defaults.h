// The pods the operator runs from AntDT's own image (the sharding service, the
// built-in parameter server and trainer) meet Pod Security "restricted" and
// carry resource requests, so shared clusters' admission accepts them; a job's
// pod template (spec.shardingService.template, spec.parameterServers.template)
// merges over them, as a strategic merge patch would.
#pragma once

#include "backends/kubernetes/client/object.h"

namespace antdt::reconciler {

using Json = kube::Json;

// AntDT's image runs as this user (Dockerfile).
inline constexpr int64_t kImageUid = 65532;

// Gives `pod_spec` and each of its containers what they lack of: pod
// securityContext runAsNonRoot, runAsUser/runAsGroup/fsGroup 65532, seccomp
// RuntimeDefault; container securityContext allowPrivilegeEscalation false,
// readOnlyRootFilesystem true, capabilities drop ALL, `resources`; an emptyDir
// at /tmp (the one place a read-only root leaves to write). Set fields are kept.
void ApplySecureDefaults(Json& pod_spec, const Json& resources);

// Merges the pod template `tmpl` ({metadata, spec}) into `pod`: metadata.labels
// and annotations added (the pod's own labels win: they select it); spec merged
// key by key, objects recursively, lists replaced, except the lists Kubernetes
// merges by name (containers, initContainers, volumes, volumeMounts, env,
// ports), whose items merge with the pod's item of the same name (a template's
// unnamed first container merges into the first). A template container with
// its own command drops the pod's args for it. null removes a field.
void MergePodTemplate(Json& pod, const Json& tmpl);

// Makes `path` writable under a read-only root filesystem: unless a volume is
// mounted at it or above it in the first container, an emptyDir `volume` is.
void EnsureWritable(Json& pod_spec, const std::string& path, const std::string& volume);

}  // namespace antdt::reconciler
