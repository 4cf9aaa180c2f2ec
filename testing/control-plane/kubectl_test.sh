#!/usr/bin/env bash
# The real kubectl against the real control plane (etcd, kube-apiserver,
# controller-manager and scheduler built by scripts/build-k8s.sh, started once by
# antdt_control_plane.py): apply the AntDTJob CRD and a job, get (printer
# columns), describe, -o yaml, re-apply (generation), get -w, validation errors,
# scale, Pod Security, edit, replace, explain, server-side apply, delete; each
# kubectl in a namespace of its own. Exits 77 (SKIPPED) naming what is missing
# when the control plane is not built.
# Usage: kubectl_test.sh <source dir>
set -euo pipefail

SRC=${1:?source dir}
HARNESS="$SRC/testing/control-plane/antdt_control_plane.py"
# With KUBECTL unset: the kubectl of the built release, then the kubectl on the
# PATH (on a fresh Debian 12 that is kubernetes-client, 1.20) and, where it is a
# dispatcher with versioned clients beside it (kubectl.1.27 ... kubectl.1.33),
# the oldest and the newest of those.
if [[ -z "${KUBECTL:-}" ]]; then
  default=$(command -v kubectl) ||
    { echo "FAIL: no kubectl on the PATH (scripts/install-deps.sh installs kubernetes-client)" >&2; exit 1; }
  clients=("$default")
  mapfile -t versioned < <(ls "$(dirname "$(readlink -f "$default")")"/kubectl.1.* 2>/dev/null | sort -V)
  if [[ ${#versioned[@]} -gt 0 ]]; then
    clients+=("${versioned[0]}")
    [[ ${#versioned[@]} -gt 1 ]] && clients+=("${versioned[-1]}")
  fi
  BIN_DIR=$(/usr/bin/python3 "$HARNESS" bin-dir) || exit $?  # 77: not built, SKIPPED
  clients=("$BIN_DIR/kubectl" "${clients[@]}")
  PLANE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/kubectl-test-plane.XXXXXX")
  PLANE_PID=""
  stop_plane() {
    if [[ -n "$PLANE_PID" ]]; then kill "$PLANE_PID" 2>/dev/null || true; wait "$PLANE_PID" 2>/dev/null || true; fi
    rm -rf "$PLANE_DIR"
  }
  trap stop_plane EXIT
  /usr/bin/python3 "$HARNESS" run --dir "$PLANE_DIR/cp" --ready-file "$PLANE_DIR/ready" &
  PLANE_PID=$!
  while [[ ! -s "$PLANE_DIR/ready" ]]; do
    kill -0 "$PLANE_PID" 2>/dev/null || { echo "FAIL: the control plane did not start" >&2; exit 1; }
    sleep 0.2
  done
  export REAL_KUBECONFIG="$PLANE_DIR/cp/admin.kubeconfig"
  "${clients[0]}" --kubeconfig "$REAL_KUBECONFIG" version
  n=0
  for client in "${clients[@]}"; do
    n=$((n + 1))
    echo "=== $client ($("$client" version --client 2>/dev/null | head -1))"
    KUBECTL="$client" TEST_NAMESPACE="kubectl-$n" bash "$0" "$@" || exit 1
  done
  exit 0
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kubectl-test.XXXXXX")
WATCH_PID=""
cleanup() {
  [[ -n "$WATCH_PID" ]] && kill "$WATCH_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

NS=${TEST_NAMESPACE:?}
cp "${REAL_KUBECONFIG:?}" "$WORK/kubeconfig"
export KUBECONFIG="$WORK/kubeconfig"
"$KUBECTL" config set-context --current --namespace="$NS" >/dev/null
"$KUBECTL" create namespace "$NS" >/dev/null
k() { timeout 60 "$KUBECTL" --cache-dir "$WORK/cache" --request-timeout=30s "$@"; }

echo "== apply the CRD"
k apply -f "$SRC/crds/antdt.io_antdtjobs.yaml" || fail "apply CRD"
k wait --for=condition=established --timeout=30s crd/antdtjobs.antdt.io || fail "wait established"

echo "== apply the quickstart job"
k apply -f "$SRC/examples/jobs/quickstart.yaml" || fail "apply job"
OUT=$(k get adt) || fail "get adt"
echo "$OUT"
HEADER=$(echo "$OUT" | head -1)
for column in NAME READY WORKERS PROGRESS STRAGGLERS AGE; do
  [[ "$HEADER" == *"$column"* ]] || fail "kubectl get adt: no $column column in: $HEADER"
done
echo "$OUT" | grep -q '^quickstart ' || fail "kubectl get adt: no quickstart row"

YAML=$(k get adt quickstart -o yaml) || fail "get -o yaml"
for field in "uid:" "resourceVersion:" "generation: 1" "creationTimestamp:"; do
  [[ "$YAML" == *"$field"* ]] || fail "-o yaml lacks $field"
done

echo "== describe"
OUT=$(k describe adt quickstart) || fail "kubectl describe: $OUT"
[[ "$OUT" == *"Name:"*"quickstart"* && "$OUT" == *"Kind:"*"AntDTJob"* ]] || fail "kubectl describe printed: $OUT"

echo "== built-in kinds print the API server's columns"
k run table-pod --image=antdt/antdt:0.1.0 --restart=Never >/dev/null || fail "kubectl run"
OUT=$(k get pods) || fail "get pods"
echo "$OUT"
HEADER=$(echo "$OUT" | head -1)
for column in NAME READY STATUS RESTARTS AGE; do
  [[ "$HEADER" == *"$column"* ]] || fail "kubectl get pods: no $column column in: $HEADER"
done
echo "$OUT" | grep -Eq '^table-pod +0/1 +Pending +0 ' || fail "kubectl get pods: no table-pod row 0/1 Pending 0"
k delete pod table-pod --wait=false >/dev/null || fail "delete pod"

echo "== get -w sees a change made meanwhile"
timeout 20 "$KUBECTL" --cache-dir "$WORK/cache" get adt -w >"$WORK/watch.out" 2>&1 &
WATCH_PID=$!
for _ in $(seq 1 200); do
  grep -q '^quickstart ' "$WORK/watch.out" 2>/dev/null && break
  sleep 0.1
done
grep -q '^quickstart ' "$WORK/watch.out" || fail "kubectl get -w printed no initial row"

echo "== a field a running job cannot change is refused (CRD transition rule)"
sed 's/records: 60000/records: 30000/' "$SRC/examples/jobs/quickstart.yaml" >"$WORK/quickstart-more.yaml"
if ERR=$(k apply -f "$WORK/quickstart-more.yaml" 2>&1); then
  fail "changing spec.dataset was accepted"
fi
echo "$ERR"
grep -q 'spec.dataset: Invalid value: .*is immutable' <<<"$ERR" || fail "no 422 naming spec.dataset: $ERR"

echo "== re-apply with a change bumps the generation"
sed 's/window: 2s/window: 3s/' "$SRC/examples/jobs/quickstart.yaml" >"$WORK/quickstart6.yaml"
k apply -f "$WORK/quickstart6.yaml" | grep -q configured || fail "re-apply"
GEN=$(k get adt quickstart -o jsonpath='{.metadata.generation}')
[[ "$GEN" == 2 ]] || fail "generation after re-apply is $GEN, want 2"
# kubectl 1.24 and later patch the status subresource; older clients (Debian
# 12's kubernetes-client is 1.20) PUT the whole object to it.
if "$KUBECTL" patch --help | grep -q -- '--subresource'; then
  k patch adt quickstart --subresource=status --type=merge \
    -p '{"status":{"workers":{"summary":"3/6"}}}' >/dev/null || fail "status patch"
else
  RV=$(k get adt quickstart -o jsonpath='{.metadata.resourceVersion}') || fail "get resourceVersion"
  echo '{"apiVersion":"antdt.io/v1alpha1","kind":"AntDTJob","metadata":{"name":"quickstart",'\
'"namespace":"'"$NS"'","resourceVersion":"'"$RV"'"},"status":{"workers":{"summary":"3/6"}}}' \
    >"$WORK/status.json"
  k replace --raw /apis/antdt.io/v1alpha1/namespaces/$NS/antdtjobs/quickstart/status \
    -f "$WORK/status.json" >/dev/null || fail "status replace"
fi
GEN=$(k get adt quickstart -o jsonpath='{.metadata.generation}')
[[ "$GEN" == 2 ]] || fail "generation after a status patch is $GEN, want 2"

for _ in $(seq 1 200); do
  grep -q '3/6' "$WORK/watch.out" && break
  sleep 0.1
done
cat "$WORK/watch.out"
grep -q '3/6' "$WORK/watch.out" || fail "kubectl get -w did not print the status change"
kill "$WATCH_PID" 2>/dev/null || true
WATCH_PID=""

echo "== kubectl scale sets spec.workers.replicas (the CRD's scale subresource)"
OUT=$(k scale adt quickstart --replicas=6 2>&1) || fail "kubectl scale: $OUT"
echo "$OUT"
REPLICAS=$(k get adt quickstart -o jsonpath='{.spec.workers.replicas}')
[[ "$REPLICAS" == 6 ]] || fail "spec.workers.replicas after kubectl scale is $REPLICAS, want 6"
GEN=$(k get adt quickstart -o jsonpath='{.metadata.generation}')
[[ "$GEN" == 3 ]] || fail "generation after kubectl scale is $GEN, want 3"
SCALE=$(k get --raw /apis/antdt.io/v1alpha1/namespaces/$NS/antdtjobs/quickstart/scale)
[[ "$SCALE" == *'"kind":"Scale"'* && "$SCALE" == *'"replicas":6'* ]] || fail "the Scale reads $SCALE"
if ERR=$(k scale adt quickstart --replicas=0 2>&1); then
  fail "scaling to 0 workers was accepted: $ERR"
fi
echo "$ERR"
[[ "$ERR" == *"spec.workers.replicas"* ]] || fail "the refusal does not name spec.workers.replicas: $ERR"

echo "== an invalid job is rejected naming the field"
sed 's/replicas: 4/replicas: -2/; s/name: quickstart/name: broken/' \
  "$SRC/examples/jobs/quickstart.yaml" >"$WORK/broken.yaml"
if ERR=$(k apply -f "$WORK/broken.yaml" 2>&1); then
  fail "an invalid job was accepted: $ERR"
fi
echo "$ERR"
[[ "$ERR" == *"spec.workers.replicas"* ]] || fail "error does not name spec.workers.replicas: $ERR"
[[ "$ERR" == *'is invalid'* ]] || fail "error is not an Invalid: $ERR"

echo "== Pod Security admission: a namespace enforcing restricted"
cat >"$WORK/psa.yaml" <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: $NS-psa
  labels:
    pod-security.kubernetes.io/enforce: restricted
---
apiVersion: v1
kind: Pod
metadata:
  name: loose
  namespace: $NS-psa
spec:
  hostNetwork: true
  containers:
  - name: c
    image: busybox
YAML
if ERR=$(k apply -f "$WORK/psa.yaml" 2>&1); then
  fail "a pod breaking restricted was admitted: $ERR"
fi
echo "$ERR"
[[ "$ERR" == *'pods "loose" is forbidden: violates PodSecurity "restricted:latest": host namespaces (hostNetwork=true)'* ]] ||
  fail "the refusal does not name the checks: $ERR"
[[ "$ERR" == *'runAsNonRoot != true'* ]] || fail "the refusal does not name runAsNonRoot: $ERR"
cat >"$WORK/psa-deploy.yaml" <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: loose
  namespace: $NS-psa
spec:
  selector: {matchLabels: {app: loose}}
  template:
    metadata: {labels: {app: loose}}
    spec:
      containers:
      - name: c
        image: busybox
YAML
OUT=$(k apply -f "$WORK/psa-deploy.yaml" 2>&1) || fail "a Deployment was refused: $OUT"
echo "$OUT"
[[ "$OUT" == *'Warning: would violate PodSecurity "restricted:latest"'* ]] ||
  fail "no warning for a workload whose pods would be refused: $OUT"

echo "== fields the schema lacks are refused naming them; edit, replace and explain work"
# kubectl 1.24+ reads /openapi/v3, sees that the server checks the job's
# fields and sends fieldValidation=Strict; kubectl 1.20 checks against the
# /openapi/v2 definition itself. Either way the unknown field is named.
sed 's/^spec:/spec:\n  colour: red/' "$SRC/examples/jobs/quickstart.yaml" >"$WORK/colour.yaml"
if ERR=$(k apply -f "$WORK/colour.yaml" 2>&1); then fail "an unknown field was accepted: $ERR"; fi
echo "$ERR"
[[ "$ERR" == *'unknown field "spec.colour"'* || "$ERR" == *'unknown field "colour" in io.antdt.v1alpha1.AntDTJob.spec'* ]] ||
  fail "the refusal does not name spec.colour: $ERR"
if ERR=$(k replace -f "$WORK/colour.yaml" 2>&1); then fail "replace with an unknown field was accepted"; fi
[[ "$ERR" == *colour* ]] || fail "the replace refusal does not name colour: $ERR"
[[ $(k get adt quickstart -o jsonpath='{.spec.monitor.window}') == 3s ]] || fail "a refused write changed the job"
# --validate=false: accepted, and the unknown field pruned away.
k apply --validate=false -f "$WORK/colour.yaml" >/dev/null || fail "apply --validate=false"
[[ -z $(k get adt quickstart -o jsonpath='{.spec.colour}') ]] || fail "spec.colour was stored"
cat >"$WORK/editor.sh" <<'EDITOR'
#!/bin/sh
sed -i 's/^  name: quickstart$/  name: quickstart\n  annotations: {antdt.io\/edited: "yes"}/' "$1"
EDITOR
chmod +x "$WORK/editor.sh"
EDITOR="$WORK/editor.sh" k edit adt quickstart || fail "kubectl edit"
[[ $(k get adt quickstart -o jsonpath='{.metadata.annotations.antdt\.io/edited}') == yes ]] ||
  fail "kubectl edit did not change the job"
k get adt quickstart -o yaml >"$WORK/current.yaml"
k replace -f "$WORK/current.yaml" >/dev/null || fail "kubectl replace"
OUT=$(k explain adt.spec.workers 2>&1) || fail "kubectl explain: $OUT"
[[ "$OUT" == *AntDTJob* && "$OUT" == *replicas* ]] || fail "kubectl explain printed: $OUT"

echo "== server-side apply: field managers and conflicts"
# spec.monitor.window is 2s, set by the client-side apply of colour.yaml: applying
# 3s server-side conflicts with that manager until forced.
if ERR=$(k apply --server-side -f "$WORK/quickstart6.yaml" 2>&1); then
  fail "a server-side apply over another manager's field was accepted"
fi
echo "$ERR" | head -1
[[ "$ERR" == *'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply"'*': .spec.monitor.window'* ]] ||
  fail "the conflict does not name the manager and the field: $ERR"
[[ $(k get adt quickstart -o jsonpath='{.spec.monitor.window}') == 2s ]] || fail "a conflicting apply changed the job"
k apply --server-side --force-conflicts -f "$WORK/quickstart6.yaml" >/dev/null || fail "server-side apply --force-conflicts"
[[ $(k get adt quickstart -o jsonpath='{.spec.monitor.window}') == 3s ]] || fail "the forced apply did not set the window"
MANAGERS=$(k get adt quickstart -o jsonpath='{range .metadata.managedFields[*]}{.manager}:{.operation} {end}')
echo "managers: $MANAGERS"
[[ "$MANAGERS" == *"kubectl:Apply"* && "$MANAGERS" == *"kubectl-client-side-apply:Update"* ]] ||
  fail "managedFields lists: $MANAGERS"
# Another applier (a platform tool) wanting the window that kubectl applies.
sed 's/window: 3s/window: 5s/' "$WORK/quickstart6.yaml" >"$WORK/platform.yaml"
if ERR=$(k apply --server-side --field-manager=platform -f "$WORK/platform.yaml" 2>&1); then
  fail "a second applier took kubectl's field without --force-conflicts"
fi
[[ "$ERR" == *'conflict with "kubectl"'*'.spec.monitor.window'* ]] || fail "the conflict reads: $ERR"
# The same values co-own: no conflict.
k apply --server-side --field-manager=platform -f "$WORK/quickstart6.yaml" >/dev/null ||
  fail "applying the same values as another manager conflicted"

echo "== delete"
k get configmaps -A >/dev/null || fail "get configmaps"
k delete adt quickstart || fail "delete"
if k get adt quickstart >/dev/null 2>&1; then fail "quickstart still exists after delete"; fi
k delete -f "$SRC/crds/antdt.io_antdtjobs.yaml" || fail "delete CRD"
echo "PASS"
