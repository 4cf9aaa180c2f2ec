"""The Helm chart deploy/helm/antdt, rendered by the real helm.

Renders with `helm template` (helm 4, built by scripts/build-k8s.sh; ANTDT_HELM, which
ctest sets), then checks what a platform team's cluster would check:

- helm lint passes for the default values and a values file that turns every option on
  (testing/helm/all-on.yaml); every object it renders passes a server-side dry run on the
  real API server (testing/control-plane: its own schemas, admission and defaulting), has
  no field its kind does not know (the Kubernetes Python client's models, field by field),
  and, where npm could install it, validates against npm kubernetes-models (which also
  know the Prometheus Operator's kinds, not served by the test API server);
- every pod but the agent's meets Pod Security "restricted"; the agent's only
  exceptions are the host network, its ports and the read-only host paths;
- resources on every container, probes, the node name from the downward API;
- least-privilege RBAC: cluster-wide only the nodes, Roles when the operator is scoped;
- bad values fail naming the field; names fit in 63 characters for long releases;
- the chart's copies of the CRD and the Prometheus rules equal their sources.

Run: ANTDT_HELM=<helm> /usr/bin/python3 -m unittest -v chart_test (from testing/helm).
"""

import json
import os
import re
import subprocess
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHART = os.path.join(REPO, "deploy", "helm", "antdt")
ALL_ON = os.path.join(HERE, "all-on.yaml")
VALIDATE = os.path.join(HERE, "validate", "validate.mjs")
# npm kubernetes-models, installed by scripts/install-deps.sh where the npm registry is
# reachable; without it the client's models alone check each kind.
HAVE_KUBERNETES_MODELS = os.path.isdir(os.path.join(HERE, "validate", "node_modules", "kubernetes-models"))
if not HAVE_KUBERNETES_MODELS:
    print("helm_chart_test: npm kubernetes-models not installed (testing/helm/validate): "
          "the Kubernetes Python client's models check each kind alone")
HELM = os.environ.get("ANTDT_HELM")  # the real helm (scripts/build-k8s.sh)

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def render(*args, namespace="antdt-system", name="antdt"):
    """(returncode, stdout, stderr) of `helm template` on the chart; with --notes, the
    release notes (of `helm install --dry-run=client`)."""
    if "--notes" in args:
        rest = [a for a in args if a != "--notes"]
        p = subprocess.run([HELM, "install", name, CHART, "--namespace", namespace, "--dry-run=client", *rest],
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout.split("NOTES:\n", 1)[-1] if "NOTES:\n" in p.stdout else "", p.stderr
    p = subprocess.run([HELM, "template", name, CHART, "--namespace", namespace, *args],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def render_objects(*args, **kw):
    rc, out, err = render(*args, **kw)
    if rc != 0:
        raise AssertionError("render failed: %s" % err)
    return [d for d in yaml.safe_load_all(out) if d], out


def find(objs, kind, name=None):
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def pod_specs(objs):
    """(object, pod spec) for every object that holds one."""
    for o in objs:
        if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job", "ReplicaSet"):
            yield o, o["spec"]["template"]["spec"]
        elif o["kind"] == "Pod":
            yield o, o["spec"]


# --- The schema of each kind, by the Kubernetes Python client's models ---------------------

_PRIMITIVES = {"str", "int", "bool", "float", "object", "datetime", "date"}
# Fields newer than the client's models (python3-kubernetes 22.6 knows Kubernetes 1.22).
_NEWER_FIELDS = {"V1JSONSchemaProps": {"x-kubernetes-validations"}, "V1Probe": {"grpc"}}
# resource.Quantity: a string in the models, a number in YAML too.
_QUANTITY_KEYS = {"limits", "requests", "sizeLimit", "capacity", "hard"}


def _primitive_ok(value, typ, quantity):
    if typ == "str" or typ in ("datetime", "date"):
        return isinstance(value, str) or (quantity and isinstance(value, (int, float)) and not isinstance(value, bool))
    if typ == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ == "bool":
        return isinstance(value, bool)
    return True  # object: anything (IntOrString, raw extensions)


def schema_errors(obj):
    """Where the object breaks the schema of its kind: fields the kind does not define, values
    of the wrong type, required fields missing; each error names the field. [] for kinds the
    client does not know (the Prometheus Operator's: kubernetes-models checks those)."""
    import kubernetes.client as k8s
    version = obj["apiVersion"].split("/")[-1]
    cls = getattr(k8s, version.capitalize() + obj["kind"], None)
    if cls is None:
        return []
    errors = []

    def walk(value, typ, where, quantity=False):
        if value is None:
            return
        m = re.match(r"^list\[(.*)\]$", typ)
        if m:
            if not isinstance(value, list):
                errors.append("%s: must be a list" % where)
                return
            for i, item in enumerate(value):
                walk(item, m.group(1), "%s[%d]" % (where, i), quantity)
            return
        m = re.match(r"^dict\(str, (.*)\)$", typ)
        if m:
            if not isinstance(value, dict):
                errors.append("%s: must be a mapping" % where)
                return
            for k, v in value.items():
                walk(v, m.group(1), "%s.%s" % (where, k), quantity)
            return
        if typ in _PRIMITIVES:
            if not _primitive_ok(value, typ, quantity):
                errors.append("%s: must be %s, got %r" % (where, typ, value))
            return
        model = getattr(k8s, typ, None)
        if model is None:
            return
        if not isinstance(value, dict):
            errors.append("%s: must be a mapping (%s)" % (where, typ))
            return
        by_json = {j: a for a, j in model.attribute_map.items()}
        for key, v in value.items():
            if key in _NEWER_FIELDS.get(typ, ()):
                continue
            if key not in by_json:
                errors.append("%s.%s: unknown field" % (where, key))
            else:
                walk(v, model.openapi_types[by_json[key]], "%s.%s" % (where, key), key in _QUANTITY_KEYS)
        # Required fields: the model's constructor refuses None for them.
        try:
            model(**{by_json[k]: v for k, v in value.items() if k in by_json})
        except ValueError as e:
            errors.append("%s: %s" % (where, e))

    walk(obj, cls.__name__, obj["kind"])
    return errors


# --- Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards) --

_RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                       "persistentVolumeClaim", "projected", "secret"}
_BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                  "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}


def restricted_violations(spec):
    """What keeps a pod spec from Pod Security "restricted" (baseline included)."""
    v = []
    psc = spec.get("securityContext") or {}
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            v.append(field)
    for vol in spec.get("volumes") or []:
        kinds = set(vol) - {"name"}
        if "hostPath" in kinds:
            v.append("volumes[%s].hostPath" % vol["name"])
        elif not kinds <= _RESTRICTED_VOLUMES:
            v.append("volumes[%s]: %s" % (vol["name"], ",".join(sorted(kinds))))
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp == "Unconfined":
        v.append("securityContext.seccompProfile Unconfined")
    if psc.get("runAsUser") == 0:
        v.append("securityContext.runAsUser 0")
    for c in containers:
        sc = c.get("securityContext") or {}
        name = "containers[%s]" % c["name"]
        if sc.get("privileged"):
            v.append(name + ".privileged")
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                v.append("%s.ports.hostPort %d" % (name, p["hostPort"]))
        caps = sc.get("capabilities") or {}
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            v.append(name + ".capabilities.add")
        if "ALL" not in (caps.get("drop") or []):
            v.append(name + ".capabilities.drop lacks ALL")
        if sc.get("allowPrivilegeEscalation") is not False:
            v.append(name + ".allowPrivilegeEscalation not false")
        if not (sc.get("runAsNonRoot") is True or (psc.get("runAsNonRoot") is True and sc.get("runAsNonRoot") is not False)):
            v.append(name + ".runAsNonRoot not true")
        if sc.get("runAsUser") == 0:
            v.append(name + ".runAsUser 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            v.append(name + ".seccompProfile not RuntimeDefault")
        if sc.get("procMount", "Default") != "Default":
            v.append(name + ".procMount")
    return v


class ChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not HELM or not os.access(HELM, os.X_OK):
            raise unittest.SkipTest("no helm (ANTDT_HELM=%s; scripts/build-k8s.sh builds it)" % HELM)
        cls.defaults, cls.defaults_text = render_objects("--include-crds")
        cls.all_on, cls.all_on_text = render_objects("--include-crds", "-f", ALL_ON)

    def validate(self, objs, text):
        """Every object against the schema of its kind: the Kubernetes Python client's models
        always; npm kubernetes-models (the OpenAPI schemas, newer kinds and fields, the
        Prometheus Operator's kinds) where scripts/install-deps.sh could install it."""
        for o in objs:
            self.assertEqual(schema_errors(o), [], "%s %s" % (o["kind"], o["metadata"]["name"]))
        if not HAVE_KUBERNETES_MODELS:
            return
        p = subprocess.run(["node", VALIDATE, "-"], input=text, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(" 0 invalid", p.stdout)

    def test_default_objects_validate_against_their_kinds(self):
        self.validate(self.defaults, self.defaults_text)
        kinds = sorted({o["kind"] for o in self.defaults})
        self.assertEqual(kinds, ["ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "DaemonSet",
                                 "Deployment", "Pod", "PodDisruptionBudget", "Role", "RoleBinding", "Service",
                                 "ServiceAccount"])

    def test_every_option_on_validates(self):
        self.validate(self.all_on, self.all_on_text)
        kinds = {o["kind"] for o in self.all_on}
        for k in ("ServiceMonitor", "PrometheusRule", "ConfigMap", "NetworkPolicy"):
            self.assertIn(k, kinds)

    def test_the_validators_catch_what_they_should(self):
        # A type error, a typo'd field and a missing required field.
        bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
               "spec": {"ports": [{"port": "80", "protocoll": "TCP"}]}}
        self.assertEqual(schema_errors(bad), ["Service.spec.ports[0].port: must be int, got '80'",
                                              "Service.spec.ports[0].protocoll: unknown field"])
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
               "spec": {"selector": {}, "template": {"spec": {"containers": [{"image": "i"}]}}}}
        self.assertEqual(schema_errors(dep), [
            "Deployment.spec.template.spec.containers[0]: Invalid value for `name`, must not be `None`"])
        if HAVE_KUBERNETES_MODELS:
            p = subprocess.run(["node", VALIDATE, "-"], input=yaml.safe_dump(bad), capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(p.returncode, 1)
            self.assertIn("/spec/ports/0/port must be integer", p.stdout)
        pod = {"securityContext": {}, "containers": [{"name": "c", "securityContext": {"privileged": True}}],
               "hostNetwork": True}
        self.assertIn("hostNetwork", restricted_violations(pod))
        self.assertIn("containers[c].privileged", restricted_violations(pod))

    def test_pods_meet_pod_security_restricted_but_the_agent(self):
        for objs in (self.defaults, self.all_on):
            for o, spec in pod_specs(objs):
                violations = restricted_violations(spec)
                if o["kind"] == "DaemonSet":
                    # The agent's exceptions, each needed: the node's network (workers send
                    # to $(HOST_IP)), its ports there, /proc and the cgroup tree read-only,
                    # and with TLS the node's own certificate, read-only.
                    tls = ["volumes[tls].hostPath"] if objs is self.all_on else []
                    self.assertEqual(sorted(violations), sorted([
                        "hostNetwork", "volumes[proc].hostPath", "volumes[cgroup].hostPath",
                        "containers[agent].ports.hostPort 9400", "containers[agent].ports.hostPort 9402"] + tls))
                    mounts = spec["containers"][0]["volumeMounts"]
                    self.assertTrue(all(m.get("readOnly") for m in mounts if m["name"] in ("proc", "cgroup", "tls")))
                else:
                    self.assertEqual(violations, [], o["metadata"]["name"])
                for c in spec["containers"]:
                    self.assertTrue(c["securityContext"].get("readOnlyRootFilesystem"), c["name"])

    def test_every_container_has_resources_and_the_long_running_ones_probes(self):
        for objs in (self.defaults, self.all_on):
            for o, spec in pod_specs(objs):
                for c in spec["containers"]:
                    self.assertIn("requests", c.get("resources", {}), c["name"])
                    self.assertIn("limits", c.get("resources", {}), c["name"])
                    self.assertIn("memory", c["resources"]["limits"], c["name"])
                    if o["kind"] != "Pod":
                        self.assertIn("readinessProbe", c)
                        self.assertIn("livenessProbe", c)
        [op] = find(self.defaults, "Deployment")
        c = op["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(c["readinessProbe"]["grpc"], {"port": 9401, "service": "antdt.operator"})
        self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/healthz")

    def test_the_agent_runs_on_every_node_under_its_node_name(self):
        [ds] = find(self.defaults, "DaemonSet")
        spec = ds["spec"]["template"]["spec"]
        c = spec["containers"][0]
        self.assertIn("--node=$(NODE_NAME)", c["args"])
        env = {e["name"]: e for e in c["env"]}
        self.assertEqual(env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName")
        self.assertEqual(env["HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"], "status.hostIP")
        self.assertIn("--listen=$(HOST_IP):9400", c["args"])
        self.assertIn("--monitor=antdt-monitor.antdt-system.svc:9401", c["args"])
        self.assertEqual(spec["dnsPolicy"], "ClusterFirstWithHostNet")
        self.assertEqual(spec["tolerations"], [{"operator": "Exists"}])
        self.assertEqual(spec["priorityClassName"], "system-node-critical")
        self.assertFalse(spec["automountServiceAccountToken"])
        # GPU nodes: the NVIDIA runtime class and its variables when asked for.
        [ds] = find(self.all_on, "DaemonSet")
        spec = ds["spec"]["template"]["spec"]
        self.assertEqual(ds["metadata"]["namespace"], "antdt-agents")
        self.assertEqual(spec["runtimeClassName"], "nvidia")
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], "all")
        self.assertIn("--labels=antdt.io/hardware=a100,antdt.io/pool=gpu", spec["containers"][0]["args"])
        self.assertIn("--cgroups=kubepods.slice", spec["containers"][0]["args"])
        self.assertEqual(spec["imagePullSecrets"], [{"name": "regcred"}])

    def test_tls_reaches_every_endpoint_and_its_scrapers(self):
        tls_flags = ["--tls-cert=/etc/antdt/tls/tls.crt", "--tls-key=/etc/antdt/tls/tls.key",
                     "--tls-ca=/etc/antdt/tls/ca.crt", "--tls-server-name=antdt.internal"]
        [deploy] = find(self.all_on, "Deployment")
        spec = deploy["spec"]["template"]["spec"]
        c = spec["containers"][0]
        for flag in tls_flags + ["--pod-tls-secret=antdt-tls"]:
            self.assertIn(flag, c["args"])
        self.assertEqual(c["readinessProbe"]["tcpSocket"]["port"], 9401)  # gRPC probes are plaintext
        self.assertEqual(c["livenessProbe"]["httpGet"]["scheme"], "HTTPS")
        self.assertIn({"name": "tls", "secret": {"secretName": "antdt-operator-tls"}}, spec["volumes"])
        [ds] = find(self.all_on, "DaemonSet")
        spec = ds["spec"]["template"]["spec"]
        for flag in tls_flags:
            self.assertIn(flag, spec["containers"][0]["args"])
        self.assertIn({"name": "tls", "hostPath": {"path": "/etc/antdt/node-tls", "type": "Directory"}},
                      spec["volumes"])
        for monitor in find(self.all_on, "ServiceMonitor"):
            endpoint = monitor["spec"]["endpoints"][0]
            self.assertEqual(endpoint["scheme"], "https")
            self.assertEqual(endpoint["tlsConfig"]["serverName"], "antdt.internal")
        [test_pod] = [p for p in find(self.all_on, "Pod") if p["metadata"]["name"].endswith("test-connection")]
        self.assertIn("grpc.ssl_target_name_override", test_pod["spec"]["containers"][0]["args"][0])
        # Off by default: no flag, gRPC readiness.
        [deploy] = find(self.defaults, "Deployment")
        c = deploy["spec"]["template"]["spec"]["containers"][0]
        self.assertFalse([a for a in c["args"] if a.startswith("--tls")])
        self.assertIn("grpc", c["readinessProbe"])

    def test_the_operator_elects_a_leader_and_the_monitor_service_selects_it(self):
        [dep] = find(self.defaults, "Deployment")
        self.assertEqual(dep["spec"]["replicas"], 2)
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        for a in ("--leader-elect=true", "--leader-election-namespace=antdt-system",
                  "--leader-election-id=antdt-operator", "--pod-name=$(POD_NAME)",
                  "--image=antdt/antdt:0.1.0"):
            self.assertIn(a, args)
        self.assertFalse([a for a in args if a.startswith("--namespace=")])
        [svc] = find(self.defaults, "Service", "antdt-monitor")
        self.assertEqual(svc["spec"]["selector"]["antdt.io/leader"], "true")
        [dep] = find(self.all_on, "Deployment")
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertIn("--namespace=team-a", args)
        self.assertIn("--image=registry.example.com/ml/antdt:0.1.0-torch", args)
        self.assertIn("--ready-file=/tmp/operator.ready", args)  # extraArgs
        self.assertIn("--master-port=29500", args)
        self.assertEqual(dep["spec"]["template"]["spec"]["containers"][0]["image"],
                         "registry.example.com/ml/antdt@sha256:" + "0123456789abcdef" * 4)
        # Without leader election: every replica's Monitor is the acting one's.
        objs, _ = render_objects("--set", "operator.leaderElection.enabled=false", "--set", "operator.replicas=1")
        [svc] = find(objs, "Service", "antdt-monitor")
        self.assertNotIn("antdt.io/leader", svc["spec"]["selector"])
        self.assertEqual(self.rules(find(objs, "Role")), {
            ("Role", "antdt-system", "", "pods", "get", ""),
            ("Role", "antdt-system", "", "secrets", "get", "antdt-operator-key")})
        self.assertFalse(find(objs, "PodDisruptionBudget"))
        self.assertIn("--job-credentials=true", args)
        self.assertIn("--token-key-secret=antdt-operator-key", args)
        # Without job credentials: no secrets granted anywhere.
        objs, _ = render_objects("--set", "operator.jobCredentials=false")
        self.assertFalse([r for r in self.rules(objs) if r[3] == "secrets"])
        [dep] = find(objs, "Deployment")
        self.assertIn("--job-credentials=false", dep["spec"]["template"]["spec"]["containers"][0]["args"])

    def rules(self, objs):
        out = set()
        for o in objs:
            if o["kind"] in ("ClusterRole", "Role"):
                for r in o["rules"]:
                    for g in r["apiGroups"]:
                        for res in r["resources"]:
                            for verb in r["verbs"]:
                                out.add((o["kind"], o["metadata"].get("namespace", ""), g, res, verb,
                                         ",".join(r.get("resourceNames", []))))
        return out

    def test_rbac_grants_only_what_the_operator_uses(self):
        jobs = [("antdt.io", "antdtjobs", v) for v in ("get", "list", "watch", "delete")] + [
            ("antdt.io", "antdtjobs/status", "update")] + [
            ("", "pods", v) for v in ("list", "watch", "create", "delete")] + [
            ("", "services", v) for v in ("list", "watch", "create")] + [
            ("", "events", v) for v in ("create", "patch")] + [
            ("", "persistentvolumeclaims", "create"),  # the sharding state's claim
            ("", "secrets", "create")]  # each job's credential, never read back
        own = [("coordination.k8s.io", "leases", "create", ""),
               ("coordination.k8s.io", "leases", "get", "antdt-operator"),
               ("coordination.k8s.io", "leases", "update", "antdt-operator"),
               ("", "pods", "get", ""), ("", "pods", "patch", ""),
               # the key of job credentials: created once (the cluster-wide job rules
               # create Secrets here too), then only that one Secret read
               ("", "secrets", "get", "antdt-operator-key")]
        expected = {("ClusterRole", "", "", "nodes", v, "") for v in ("list", "watch")}
        expected |= {("ClusterRole", "") + j + ("",) for j in jobs}
        expected |= {("Role", "antdt-system") + r for r in own}
        self.assertEqual(self.rules(self.defaults), expected)
        # Scoped to a namespace: the job rules become a Role there; only nodes stay cluster-wide.
        scoped = {("ClusterRole", "", "", "nodes", v, "") for v in ("list", "watch")}
        scoped |= {("Role", "team-a") + j + ("",) for j in jobs}
        scoped |= {("Role", "antdt-system") + r for r in own + [("", "secrets", "create", "")]}
        # Gang scheduling (Volcano): create on the jobs' PodGroups, nothing more.
        scoped.add(("Role", "team-a", "scheduling.volcano.sh", "podgroups", "create", ""))
        # Node memory under Act with its taint: patch on nodes/status (the condition and
        # the memory annotation) and on nodes (the taint), and a Node's Events in default.
        scoped |= {("ClusterRole", "", "", "nodes/status", "patch", ""),
                   ("ClusterRole", "", "", "nodes", "patch", "")}
        scoped |= {("Role", "default", "", "events", v, "") for v in ("create", "patch")}
        self.assertEqual(self.rules(self.all_on), scoped)
        # Act without the taint: nodes/status only; Recommend (the default): neither.
        objs, _ = render_objects("--set", "operator.nodeMemory.mode=Act")
        granted = {r[3:5] for r in self.rules(objs) if r[3].startswith("nodes")}
        self.assertEqual(granted, {("nodes", "list"), ("nodes", "watch"), ("nodes/status", "patch")})
        [dep] = find(objs, "Deployment")
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        for flag in ("--node-memory=Act", "--node-taint=false", "--node-memory-half-life=6h"):
            self.assertIn(flag, args)
        # Each binding names the operator's ServiceAccount in the release's namespace.
        for o in self.all_on:
            if o["kind"] in ("RoleBinding", "ClusterRoleBinding"):
                self.assertEqual(o["subjects"], [{"kind": "ServiceAccount", "name": "antdt-operator",
                                                  "namespace": "antdt-system"}])
                self.assertTrue(find(self.all_on, o["roleRef"]["kind"], o["roleRef"]["name"]))
        # The agent's ServiceAccount is bound to nothing and mounts no token.
        bound = {s["name"] for o in self.all_on if o["kind"].endswith("Binding") for s in o["subjects"]}
        self.assertNotIn("antdt-agent", bound)
        self.assertFalse(render_objects("--set", "rbac.create=false")[0] and
                         find(render_objects("--set", "rbac.create=false")[0], "ClusterRole"))

    def test_bad_values_fail_naming_the_field(self):
        cases = [
            (["--set", "operator.replicas=two"], "operator.replicas"),
            (["--set", "operator.leaderElection.leaseDuration=15"], "operator.leaderElection.leaseDuration"),
            (["--set", "agent.port=70000"], "agent.port"),
            (["--set", "image.pullPolicy=Sometimes"], "image.pullPolicy"),
            (["--set", "operator.watchNamespace=Team_A"], "operator.watchNamespace"),
            (["--set", "agent.bogus=1"], "bogus"),
            (["--set", "image.digest=latest"], "image.digest"),
            (["--set", "operator.serviceAccount.create=false"], "operator.serviceAccount.name"),
        ]
        for args, field in cases:
            rc, out, err = render(*args)
            self.assertEqual(rc, 1, args)
            # Helm 4 names a schema violation by its JSON pointer (at '/operator/replicas').
            self.assertTrue(field in err or "'/%s'" % field.replace(".", "/") in err, (args, err))
            self.assertEqual(out, "", args)  # nothing half-rendered

    def test_names_fit_kubernetes_limits_for_long_release_names(self):
        objs, _ = render_objects("-f", ALL_ON, name="a-very-long-release-name-for-the-ml-platform-team-x")
        for o in objs:
            name = o["metadata"]["name"]
            if o["kind"] in ("Service", "Namespace"):
                self.assertRegex(name, DNS1123_LABEL)
                self.assertLessEqual(len(name), 63, name)
            else:
                self.assertRegex(name, DNS1123_SUBDOMAIN)
                self.assertLessEqual(len(name), 253, name)
            for k, v in o["metadata"].get("labels", {}).items():
                self.assertLessEqual(len(v), 63, (name, k, v))

    def test_chart_copies_equal_their_sources(self):
        def read(*p):
            with open(os.path.join(REPO, *p), "rb") as f:
                return f.read()
        for crd in os.listdir(os.path.join(REPO, "crds")):
            if crd.endswith(".yaml"):
                self.assertEqual(read("deploy", "helm", "antdt", "crds", crd), read("crds", crd), crd)
        self.assertEqual(read("deploy", "helm", "antdt", "files", "antdt-rules.yaml"),
                         read("deploy", "prometheus", "antdt-rules.yaml"))
        [rule] = find(self.all_on, "PrometheusRule")
        self.assertEqual(rule["spec"], yaml.safe_load(read("deploy", "prometheus", "antdt-rules.yaml")))
        dashboards = sorted(f for f in os.listdir(os.path.join(CHART, "dashboards")) if f.endswith(".json"))
        maps = {k: v for o in find(self.all_on, "ConfigMap") for k, v in o["data"].items()}
        self.assertEqual(sorted(maps), dashboards)
        for d in dashboards:
            self.assertEqual(json.loads(maps[d]), json.loads(read("deploy", "helm", "antdt", "dashboards", d)))
        for o in find(self.all_on, "ConfigMap"):
            self.assertEqual(o["metadata"]["labels"]["grafana_dashboard"], "1")

    def test_the_helm_test_pod_checks_operator_and_agent(self):
        [pod] = find(self.defaults, "Pod")
        self.assertEqual(pod["metadata"]["annotations"]["helm.sh/hook"], "test")
        script = pod["spec"]["containers"][0]["args"][0]
        self.assertIn("antdt-monitor.antdt-system.svc:9401", script)
        self.assertIn("antdt-agent-metrics.antdt-system.svc:9402/healthz", script)
        compile(script, "helm-test", "exec")  # the script parses
        self.assertFalse(find(render_objects("--set", "tests.enabled=false")[0], "Pod"))

    def test_notes(self):
        rc, out, err = render("--notes")
        self.assertEqual(rc, 0, err)
        self.assertIn("helm test antdt -n antdt-system", out)
        self.assertIn("rollout status deployment/antdt-operator", out)


class RealHelmTest(unittest.TestCase):
    """helm lint, and every rendered object through the real API server (testing/control-plane)
    as a server-side dry run: its own schemas, admission and defaulting decide."""

    @classmethod
    def setUpClass(cls):
        if not HELM or not os.access(HELM, os.X_OK):
            raise unittest.SkipTest("no helm (ANTDT_HELM=%s; scripts/build-k8s.sh builds it)" % HELM)
        import sys
        sys.path.insert(0, os.path.join(REPO, "testing", "control-plane"))
        import antdt_control_plane as acp
        cls.plane = acp.ControlPlane().start()
        cls.kubectl = [os.path.join(cls.plane.bin_dir, "kubectl"), "--kubeconfig", cls.plane.kubeconfig]

    @classmethod
    def tearDownClass(cls):
        cls.plane.__exit__(None, None, None)

    def test_helm_lint(self):
        for values in ([], ["-f", ALL_ON]):
            p = subprocess.run([HELM, "lint", CHART, *values], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("1 chart(s) linted, 0 chart(s) failed", p.stdout)

    def dry_run(self, objs, label):
        """Creates the namespaces and CRDs the objects need, then a server-side dry run of the
        rest; kinds the server does not serve (the Prometheus Operator's) are left out, named."""
        crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
        namespaces = sorted({o["metadata"].get("namespace") for o in objs if o["metadata"].get("namespace")})
        for ns in namespaces:
            subprocess.run(self.kubectl + ["create", "namespace", ns], capture_output=True, text=True)
        if crds:
            p = subprocess.run(self.kubectl + ["apply", "--server-side", "-f", "-"], input=yaml.safe_dump_all(crds),
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
        served = subprocess.run(self.kubectl + ["api-resources", "-o", "name"], capture_output=True, text=True,
                                timeout=60).stdout
        rest, skipped = [], set()
        for o in objs:
            if o["kind"] == "CustomResourceDefinition":
                continue
            group = o["apiVersion"].split("/")[0] if "/" in o["apiVersion"] else ""
            if group == "monitoring.coreos.com" and "monitoring.coreos.com" not in served:
                skipped.add(o["kind"])
                continue
            rest.append(o)
        p = subprocess.run(self.kubectl + ["apply", "--dry-run=server", "-f", "-"], input=yaml.safe_dump_all(rest),
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, "%s: %s" % (label, p.stderr))
        self.assertEqual(p.stdout.count("(server dry run)"), len(rest), p.stdout)
        if skipped:
            print("%s: not served here, left out of the dry run: %s" % (label, ", ".join(sorted(skipped))))

    def test_default_objects_pass_a_server_side_dry_run(self):
        objs, _ = render_objects("--include-crds")
        self.dry_run(objs, "defaults")

    def test_all_on_objects_pass_a_server_side_dry_run(self):
        objs, _ = render_objects("--include-crds", "-f", ALL_ON)
        self.dry_run(objs, "all-on")


if __name__ == "__main__":
    unittest.main()
