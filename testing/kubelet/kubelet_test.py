#!/usr/bin/python3
"""Tests of the test kubelet: its pure rules directly, its pod state machine against a fake API, and
the whole thing end to end against antdt-kube-emulator with real AntDT binaries.

Run: ANTDT_BIN_DIR=build/bin /usr/bin/python3 testing/kubelet/kubelet_test.py [-k Pattern]
With --real: only the end-to-end tests, against the real control plane (testing/control-plane:
kube-apiserver, controller-manager and kube-scheduler), the kubelet acting for each node with that
node's credentials and leaving binding to the real scheduler; exits 77 (SKIPPED) where the control
plane is not built."""

import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REAL = "--real" in sys.argv
if REAL:
    sys.argv.remove("--real")
    sys.path.insert(0, os.path.join(HERE, "..", "control-plane"))
    import antdt_control_plane as acp  # noqa: E402
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from antdt_kubelet import cgroups, process, spec  # noqa: E402
from antdt_kubelet.api import Informer  # noqa: E402
from antdt_kubelet.kubelet import IpPool, Kubelet  # noqa: E402
from antdt_kubelet.scheduler import Scheduler  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402


def make_pod(name="p", ns="ns", labels=None, node="", hostname=None, subdomain=None, ip=None, **spec_extra):
    pod = {"metadata": {"name": name, "namespace": ns, "uid": "uid-" + name, "labels": labels or {}},
           "spec": {"nodeName": node, "containers": [{"name": "main", "image": "antdt/antdt:dev"}]},
           "status": {}}
    if hostname:
        pod["spec"]["hostname"] = hostname
    if subdomain:
        pod["spec"]["subdomain"] = subdomain
    if ip:
        pod["status"] = {"phase": "Running", "podIP": ip}
    pod["spec"].update(spec_extra)
    return pod


def make_service(name, ns="ns", selector=None):
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"clusterIP": "None", "selector": selector or {}}}


class ExpandTest(unittest.TestCase):
    VARS = {"A": "a", "B": "b", "EMPTY": ""}

    def test_kubernetes_rules(self):
        cases = [
            ("$(A)", "a"), ("__$(B)__", "__b__"), ("$(A)-$(A)", "a-a"), ("$(EMPTY)", ""),
            ("$$(A)", "$(A)"), ("$$$(A)", "$a"), ("$$$$(A)", "$$(A)"), ("$$", "$"), ("x$$", "x$"),
            ("$(UNKNOWN)", "$(UNKNOWN)"), ("$(A", "$(A"), ("$(A$(B)", "$(A$(B)"), ("$", "$"), ("a$", "a$"),
            ("$x", "$x"), ("$()", "$()"), ("no refs", "no refs"), ("$(A)$(B)", "ab"), ("($(A))", "(a)"),
        ]
        for text, want in cases:
            self.assertEqual(spec.expand(text, self.VARS), want, text)


class EnvTest(unittest.TestCase):
    def test_order_fieldrefs_and_base(self):
        pod = make_pod(name="w-0", labels={"app.kubernetes.io/name": "job"}, node="n1", serviceAccountName="sa")
        pod["status"] = {"podIP": "127.1.0.10", "hostIP": "127.1.1.1"}
        fields = ["metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels['app.kubernetes.io/name']",
                  "spec.nodeName", "spec.serviceAccountName", "status.podIP", "status.hostIP"]
        env = [{"name": "F%d" % i, "valueFrom": {"fieldRef": {"fieldPath": f}}} for i, f in enumerate(fields)]
        env += [
            {"name": "ADDR", "value": "$(F6):50051"},
            {"name": "LATER_REF", "value": "$(DEFINED_LATER)"},
            {"name": "DEFINED_LATER", "value": "x"},
            {"name": "ESCAPED", "value": "$$(ADDR)"},
            {"name": "FROM_BASE", "value": "$(HOSTNAME)"},
            {"name": "HOSTNAME", "value": "override"},
            {"name": "NO_VALUE"},
        ]
        container = {"name": "c", "env": env, "command": ["antdt-ps"],
                     "args": ["--listen", "$(ADDR)", "--id", "$(HOSTNAME)", "$(MISSING)", "$$(ADDR)"]}
        result = spec.container_env(pod, container, {"HOSTNAME": "w-0", "PATH": "/bin"})
        got = dict(result)
        self.assertEqual([got["F%d" % i] for i in range(len(fields))],
                         ["w-0", "ns", "uid-w-0", "job", "n1", "sa", "127.1.0.10", "127.1.1.1"])
        self.assertEqual(got["ADDR"], "127.1.0.10:50051")
        self.assertEqual(got["LATER_REF"], "$(DEFINED_LATER)")
        self.assertEqual(got["ESCAPED"], "$(ADDR)")
        self.assertEqual(got["FROM_BASE"], "w-0")
        self.assertEqual(got["HOSTNAME"], "override")
        self.assertEqual(got["NO_VALUE"], "")
        self.assertEqual([k for k, _ in result][:2], ["HOSTNAME", "PATH"])
        self.assertEqual(spec.container_argv(container, result),
                         ["antdt-ps", "--listen", "127.1.0.10:50051", "--id", "override", "$(MISSING)", "$(ADDR)"])

    def test_unsupported_sources_are_config_errors(self):
        pod = make_pod()
        for source in ({"secretKeyRef": {"name": "s", "key": "k"}}, {"fieldRef": {"fieldPath": "spec.bogus"}}):
            container = {"env": [{"name": "X", "valueFrom": source}]}
            with self.assertRaises(spec.SpecError) as ctx:
                spec.container_env(pod, container, {})
            self.assertEqual(ctx.exception.reason, "CreateContainerConfigError")

    def test_hostname(self):
        self.assertEqual(spec.pod_hostname(make_pod(name="a")), "a")
        self.assertEqual(spec.pod_hostname(make_pod(name="a", hostname="h")), "h")


class ImageTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.bin = os.path.join(self.tmp.name, "bin")
        os.mkdir(self.bin)
        self.tool = os.path.join(self.bin, "antdt-tool")
        with open(self.tool, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(self.tool, 0o755)

    def tearDown(self):
        self.tmp.cleanup()

    def resolve(self, image, command):
        return spec.resolve_binary({"image": image, "command": command}, self.bin)

    def test_project_images(self):
        for image in ("antdt/antdt", "antdt/antdt:v1", "ghcr.io/antdt/antdt:1.2@sha256:ab", "docker.io/antdt/antdt"):
            self.assertEqual(self.resolve(image, ["antdt-tool", "--x"]), os.path.realpath(self.tool), image)
        self.assertEqual(self.resolve("antdt/antdt", [self.tool]), os.path.realpath(self.tool))

    def test_refusals(self):
        for image, command in (("busybox", ["antdt-tool"]), ("evil.io/antdt/antdt", ["antdt-tool"]),
                               ("antdt/antdt", []), ("antdt/antdt", ["/bin/sh"]), ("antdt/antdt", ["../bin/x"]),
                               ("antdt/antdt", ["antdt-missing"])):
            with self.assertRaises(spec.SpecError) as ctx:
                self.resolve(image, command)
            self.assertEqual(ctx.exception.reason, "ErrImagePull")
            self.assertTrue(ctx.exception.message)


class PythonImageTest(unittest.TestCase):
    def test_python_commands_run_the_system_python(self):
        for command in (["python3"], ["/usr/bin/python3", "-u"]):
            self.assertEqual(spec.resolve_binary({"image": "antdt/antdt:0.1.0", "command": command}, "/x/bin"),
                             spec.SYSTEM_PYTHON, command)
        with self.assertRaises(spec.SpecError):  # another interpreter is not the image's
            spec.resolve_binary({"image": "antdt/antdt", "command": ["/usr/local/bin/python3"]}, "/x/bin")

    def test_sdk_on_the_path(self):
        sdk = os.path.join(os.path.realpath("/tmp"), "python")
        self.assertEqual(spec.python_base_env("/tmp/bin"), {"PYTHONPATH": sdk, "PYTHONDONTWRITEBYTECODE": "1"})
        cases = [("", sdk), ("/a", "/a:" + sdk), ("/a:" + sdk, "/a:" + sdk), (sdk, sdk)]
        for given, want in cases:
            env = spec.keep_sdk_importable([("X", "1"), ("PYTHONPATH", given)], "/tmp/bin")
            self.assertEqual(env, [("X", "1"), ("PYTHONPATH", want)], given)

    def test_image_paths_map_to_the_image_root(self):
        argv = ["/usr/bin/python3", "/opt/antdt/examples/pytorch/train.py", "/opt/antdt", "/opt/antdtx/a",
                "/opt/other", "--x=/opt/antdt/y", "rel/opt/antdt/z"]
        self.assertEqual(spec.map_image_paths(argv, "/repo"),
                         ["/usr/bin/python3", "/repo/examples/pytorch/train.py", "/repo/", "/opt/antdtx/a",
                          "/opt/other", "--x=/opt/antdt/y", "rel/opt/antdt/z"])
        self.assertEqual(spec.map_image_paths(["/opt/antdt/bin/x"], None), ["/opt/antdt/bin/x"])  # argv[0]
        with self.assertRaises(spec.SpecError) as ctx:
            spec.map_image_paths(argv, None)
        self.assertIn("--image-root", ctx.exception.message)


class PodNetworkAndHostPathTest(unittest.TestCase):
    def test_all_addresses_mean_the_pods_own(self):
        self.assertEqual(spec.bind_to_pod_ip(["--listen=0.0.0.0:9401", "--x", "0.0.0.0:8080", "a"],
                                                "127.1.0.12"),
                         ["--listen=127.1.0.12:9401", "--x", "127.1.0.12:8080", "a"])

    def test_host_path_mounts_map_to_the_node_files(self):
        pod = {"spec": {"volumes": [{"name": "proc", "hostPath": {"path": "/proc"}},
                                    {"name": "cg", "hostPath": {"path": "/sys/fs/cgroup/"}},
                                    {"name": "tmp", "emptyDir": {}}]}}
        container = {"volumeMounts": [{"name": "proc", "mountPath": "/host/proc"},
                                      {"name": "cg", "mountPath": "/host/sys/fs/cgroup"},
                                      {"name": "tmp", "mountPath": "/tmp"}]}
        mounts = spec.host_path_mounts(pod, container)
        self.assertEqual(mounts, [("/host/sys/fs/cgroup", "/sys/fs/cgroup"), ("/host/proc", "/proc")])
        self.assertEqual(spec.map_host_paths(["agent", "--proc-root=/host/proc", "--cgroup-root",
                                                 "/host/sys/fs/cgroup/kubepods", "/tmp/x",
                                                 "/host/procfs"], mounts),
                         ["agent", "--proc-root=/proc", "--cgroup-root", "/sys/fs/cgroup/kubepods", "/tmp/x",
                          "/host/procfs"])
        # Given the pod's sandbox, an emptyDir is a directory of the pod's own.
        with tempfile.TemporaryDirectory() as sandbox:
            mounts = spec.host_path_mounts(pod, container, sandbox)
            local = os.path.join(sandbox, "volumes", "tmp")
            self.assertIn(("/tmp", local), mounts)
            self.assertTrue(os.path.isdir(local))
            self.assertEqual(spec.map_host_paths(["svc", "--state-dir", "/tmp/uid-1"], mounts),
                             ["svc", "--state-dir", local + "/uid-1"])


class DnsTest(unittest.TestCase):
    def setUp(self):
        self.pods = [
            make_pod("ss-0", labels={"role": "ss"}, hostname="ss-0", subdomain="job", ip="127.1.0.10"),
            make_pod("ps-1", labels={"role": "ps", "job": "j"}, hostname="ps-1", subdomain="job", ip="127.1.0.12"),
            make_pod("ps-0", labels={"role": "ps", "job": "j"}, hostname="ps-0", subdomain="job", ip="127.1.0.11"),
            make_pod("nip", labels={"role": "nip"}),
            make_pod("other", ns="other", labels={"role": "ss"}, ip="127.1.0.99"),
        ]
        gone = make_pod("old", labels={"role": "old"}, ip="127.1.0.50")
        gone["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
        self.pods.append(gone)
        self.services = [make_service("ss", selector={"role": "ss"}), make_service("job", selector={"job": "j"}),
                         make_service("nip", selector={"role": "nip"}), make_service("old", selector={"role": "old"}),
                         make_service("manual")]

    def rewrite(self, text):
        return spec.rewrite_hosts(text, self.pods, self.services)

    def test_services_and_pod_hostnames(self):
        self.assertEqual(self.rewrite("ss.ns.svc:50051"), ("127.1.0.10:50051", []))
        self.assertEqual(self.rewrite("ss.ns.svc.cluster.local:1"), ("127.1.0.10:1", []))
        self.assertEqual(self.rewrite("job.ns.svc"), ("127.1.0.11", []))  # lowest pod name
        self.assertEqual(self.rewrite("--ps=ps-0.job.ns.svc:7000,ps-1.job.ns.svc.cluster.local:7000"),
                         ("--ps=127.1.0.11:7000,127.1.0.12:7000", []))
        self.assertEqual(self.rewrite("http://ss.ns.svc/x"), ("http://127.1.0.10/x", []))

    def test_unresolved_names(self):
        for name in ("nip.ns.svc", "missing.ns.svc", "ss.other.svc", "manual.ns.svc", "old.ns.svc",
                     "ss-0.ss.ns.svc", "ps-9.job.ns.svc"):
            self.assertEqual(self.rewrite("x=" + name + ":1"), ("x=" + name + ":1", [name]), name)

    def test_names_of_succeeded_pods_never_resolve(self):
        done = make_pod("w-0-0", labels={"job": "w"}, hostname="w-0", subdomain="w", ip="127.1.0.20")
        done["status"]["phase"] = "Succeeded"
        failed = make_pod("w-1-0", labels={"job": "w"}, hostname="w-1", subdomain="w", ip="127.1.0.21")
        failed["status"]["phase"] = "Failed"  # the operator starts the next incarnation
        pods = self.pods + [done, failed]
        services = self.services + [make_service("w", selector={"job": "w"})]
        # worker-0 is done for good: the name stays as written and nothing waits for it.
        self.assertEqual(spec.rewrite_hosts("w-0.w.ns.svc", pods, services), ("w-0.w.ns.svc", []))
        self.assertEqual(spec.rewrite_hosts("w-1.w.ns.svc", pods, services), ("w-1.w.ns.svc", ["w-1.w.ns.svc"]))
        self.assertEqual(spec.rewrite_hosts("w-2.w.ns.svc", pods, services), ("w-2.w.ns.svc", ["w-2.w.ns.svc"]))

    def test_non_cluster_names_untouched(self):
        for text in ("ss.ns.svc.example.com", "ns.svc", "a.b.c.ss.ns.svc", "127.0.0.1:80", "ss.ns.svcx",
                     "ss.ns.svc.cluster.localhost", "xss.ns.svc-1"):
            text2, missing = self.rewrite(text)
            self.assertEqual(text2, text, text)
            if text != "ss.ns.svc.cluster.localhost":
                self.assertEqual(missing, [], text)


def node(name, **labels):
    return {"name": name, "labels": dict(labels, **{"kubernetes.io/hostname": name})}


def affinity(*terms):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


class ScheduleTest(unittest.TestCase):
    NODES = [node("n1", gpu="a100", zone="a"), node("n2", gpu="v100", zone="b"), node("n3", zone="a")]

    def fits(self, pod):
        return [n["name"] for n in self.NODES if spec.node_fits(pod, n)]

    def test_predicates(self):
        expr = lambda key, op, *values: {"key": key, "operator": op, "values": list(values)}  # noqa: E731
        self.assertEqual(self.fits(make_pod()), ["n1", "n2", "n3"])
        self.assertEqual(self.fits(make_pod(nodeSelector={"zone": "a"})), ["n1", "n3"])
        self.assertEqual(self.fits(make_pod(nodeSelector={"zone": "a", "gpu": "a100"})), ["n1"])
        cases = [
            ([{"matchExpressions": [expr("gpu", "In", "a100", "v100")]}], ["n1", "n2"]),
            ([{"matchExpressions": [expr("kubernetes.io/hostname", "NotIn", "n1")]}], ["n2", "n3"]),
            ([{"matchExpressions": [expr("gpu", "Exists")]}], ["n1", "n2"]),
            ([{"matchExpressions": [expr("gpu", "DoesNotExist")]}], ["n3"]),
            ([{"matchExpressions": [expr("gpu", "NotIn", "v100")]}], ["n1", "n3"]),
            ([{"matchExpressions": [expr("zone", "In", "a"), expr("gpu", "Exists")]}], ["n1"]),  # ANDed
            ([{"matchExpressions": [expr("gpu", "In", "v100")]},
              {"matchExpressions": [expr("gpu", "DoesNotExist")]}], ["n2", "n3"]),  # ORed
            ([{"matchFields": [expr("metadata.name", "In", "n2")]}], ["n2"]),
            ([{}], []),
            ([], []),
        ]
        for terms, want in cases:
            self.assertEqual(self.fits(make_pod(affinity=affinity(*terms))), want, terms)
        both = make_pod(nodeSelector={"zone": "a"},
                        affinity=affinity({"matchExpressions": [expr("gpu", "Exists")]}))
        self.assertEqual(self.fits(both), ["n1"])

    def test_pick_least_loaded_then_by_name(self):
        self.assertEqual(spec.pick_node(make_pod(), self.NODES, {}), "n1")
        self.assertEqual(spec.pick_node(make_pod(), self.NODES, {"n1": 1}), "n2")
        self.assertEqual(spec.pick_node(make_pod(), self.NODES, {"n1": 1, "n2": 1, "n3": 2}), "n1")
        self.assertIsNone(spec.pick_node(make_pod(nodeSelector={"zone": "c"}), self.NODES, {}))

    def test_scheduler_spreads_and_reports_unschedulable(self):
        api = FakeApi()
        pods = [make_pod("a"), make_pod("b"), make_pod("c"), make_pod("d", nodeSelector={"zone": "c"}),
                make_pod("e", schedulerName="other"), make_pod("f", node="n3")]
        for p in pods:
            api.objects["/api/v1/namespaces/ns/pods/%s/status" % p["metadata"]["name"]] = p
        Scheduler(api, self.NODES).sync(pods)
        binds = [(path.split("/")[6], body["target"]["name"]) for method, path, body in api.calls if method == "POST"]
        self.assertEqual(binds, [("a", "n1"), ("b", "n2"), ("c", "n1")])
        condition = api.objects["/api/v1/namespaces/ns/pods/d/status"]["status"]["conditions"][0]
        self.assertEqual((condition["type"], condition["status"], condition["reason"]),
                         ("PodScheduled", "False", "Unschedulable"))


class IpPoolTest(unittest.TestCase):
    def test_round_robin_skipping_used(self):
        pool = IpPool("127.3.4")
        self.assertEqual([pool.allocate() for _ in range(3)], ["127.3.4.10", "127.3.4.11", "127.3.4.12"])
        pool.release("127.3.4.10")
        ips = [pool.allocate() for _ in range(242)]
        self.assertEqual(ips[-1], "127.3.4.254")
        self.assertEqual(pool.allocate(), "127.3.4.10")
        with self.assertRaises(RuntimeError):
            pool.allocate()

    def test_a_recreated_pod_gets_its_previous_ip_when_free(self):
        pool = IpPool("127.3.5")
        a = pool.allocate("ns/sharding")
        b = pool.allocate("ns/worker-0")
        pool.release(a)
        self.assertNotEqual(pool.allocate("ns/other"), a, "a remembered IP is kept for its name")
        self.assertEqual(pool.allocate("ns/sharding"), a)
        self.assertNotEqual(pool.allocate("ns/sharding-2"), b)


class FakeApi:
    """Records requests; PUT /status stores the object it is given."""

    host = "http://127.0.0.1:6443"

    def __init__(self):
        self.calls = []
        self.objects = {}

    def request(self, method, path, body=None, query=None):
        self.calls.append((method, path, body))
        return {}

    def update_with_retry(self, path, mutate, put_path=None):
        path = put_path or path  # objects are kept under the path they are written to
        obj = mutate(copy.deepcopy(self.objects[path]))
        if obj is not None:
            self.objects[path] = obj
            self.calls.append(("PUT", path, obj))
        return obj


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class CpuQuotaTest(unittest.TestCase):
    """--cpu-quota-cgroups: a node's <node>.cpu-quota caps its containers, through a real cgroup (root, a cpu
    controller) or the speed file."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, text):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(text)

    def read(self, path):
        with open(path) as f:
            return f.read().strip()

    def test_quota_text_and_factors(self):
        self.assertEqual(cgroups.quota_text(1, 4), "12500")
        self.assertEqual(cgroups.quota_text(2, 4), "12500 50000")
        self.assertEqual(cgroups.quota_text(2, 40), "1250 50000")
        self.assertEqual(cgroups.quota_text(1, 1), "-1")
        self.assertEqual(cgroups.quota_text(2, 0.5), "max 50000")
        self.assertEqual(cgroups.quota_text(1, 100), "1000", "the kernel's least quota")
        self.write("a", "8\n")
        self.assertEqual(cgroups.read_factor(os.path.join(self.dir, "a")), 8.0)
        for bad in ("", "x", "-2", "0"):
            self.write("b", bad)
            self.assertEqual(cgroups.read_factor(os.path.join(self.dir, "b")), 1.0, bad)
        self.assertEqual(cgroups.read_factor(os.path.join(self.dir, "none")), 1.0)

    def test_emulated_through_the_speed_file(self):
        quotas = cgroups.EmulatedQuotas(["n1", "n2"], self.dir, self.dir)
        self.write("n1.cpu-quota", "4")
        quotas.sync()
        self.assertEqual(self.read(os.path.join(self.dir, "n1.speed")), "0.25")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "n2.speed")), "a node without a quota untouched")
        os.remove(os.path.join(self.dir, "n1.cpu-quota"))
        quotas.sync()
        self.assertEqual(self.read(os.path.join(self.dir, "n1.speed")), "1")

    def test_a_real_cgroup_caps_a_container_and_is_removed(self):
        try:
            groups = cgroups.CpuCgroups(["n1", "n2"], self.dir)
        except OSError as e:
            self.skipTest("no cgroup here: %s" % e)
        try:
            quota_file = "cpu.cfs_quota_us" if groups.version == 1 else "cpu.max"
            n1 = os.path.join(groups.root, groups.name("n1"))
            self.assertEqual(self.read(os.path.join(n1, quota_file)), cgroups.quota_text(groups.version, 1))
            self.write("n1.cpu-quota", "4")
            groups.sync()
            self.assertEqual(self.read(os.path.join(n1, quota_file)), cgroups.quota_text(groups.version, 4))
            log_path = os.path.join(self.dir, "log")
            proc = process.spawn(["/bin/sleep", "30"], self.dir, {}, log_path, cgroup_procs=groups.procs_file("n1"))
            try:
                self.assertIn(str(proc.pid), self.read(groups.procs_file("n1")).split())
                self.assertNotIn(str(proc.pid), self.read(groups.procs_file("n2")).split())
            finally:
                groups.remove_all()  # with the process still in it: moved out first
                process.stop_all([proc], grace_s=1)
            self.assertFalse(os.path.exists(n1))
        finally:
            groups.remove_all()


class KubeletStateMachineTest(unittest.TestCase):
    """The kubelet against a fake API, running /bin/true and /bin/false from a fake bin dir."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.bin = os.path.join(self.tmp.name, "bin")
        os.mkdir(self.bin)
        for name, target in (("ok", "/bin/true"), ("fail", "/bin/false"), ("sleep", "/bin/sleep")):
            os.symlink(target, os.path.join(self.bin, name))
        self.api = FakeApi()
        self.clock = FakeClock()
        nodes = [{"name": "n1", "labels": {}, "hostIP": "127.9.1.1"}]
        self.kubelet = Kubelet(self.api, nodes, self.bin, self.tmp.name, "127.9.0", monotonic=self.clock)

    def tearDown(self):
        self.kubelet.shutdown()
        self.tmp.cleanup()

    def pod(self, name, command, restart="Never", **extra):
        pod = make_pod(name, node="n1", restartPolicy=restart, **extra)
        pod["metadata"]["uid"] = str(uuid.uuid4())
        pod["spec"]["containers"][0]["command"] = command
        self.api.objects["/api/v1/namespaces/ns/pods/%s/status" % name] = pod
        return pod

    def status(self, pod):
        return self.api.objects["/api/v1/namespaces/ns/pods/%s/status" % pod["metadata"]["name"]]["status"]

    def run_until(self, pods, predicate, services=(), tick=0):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self.clock.t += tick
            self.kubelet.sync(pods, list(services))
            if predicate():
                return
            time.sleep(0.05)
        self.fail("condition not reached; calls: %s" % self.api.calls[-3:])

    def test_exit_codes_and_phases(self):
        ok, bad = self.pod("ok", ["ok"]), self.pod("bad", ["fail"])
        self.run_until([ok, bad], lambda: "terminated" in self.status(bad)["containerStatuses"][0]["state"]
                       and "terminated" in self.status(ok)["containerStatuses"][0]["state"])
        self.assertEqual(self.status(ok)["phase"], "Succeeded")
        self.assertEqual(self.status(ok)["containerStatuses"][0]["state"]["terminated"]["reason"], "Completed")
        self.assertEqual(self.status(bad)["phase"], "Failed")
        term = self.status(bad)["containerStatuses"][0]["state"]["terminated"]
        self.assertEqual((term["exitCode"], term["reason"]), (1, "Error"))
        self.assertEqual(self.status(ok)["podIP"], "127.9.0.10")
        self.assertEqual(self.status(ok)["hostIP"], "127.9.1.1")
        self.assertTrue(os.path.exists(os.path.join(self.kubelet.pods[ok["metadata"]["uid"]].sandbox, "log")))

    def test_restart_policies(self):
        always, onfail = self.pod("always", ["ok"], "Always"), self.pod("onfail", ["fail"], "OnFailure")

        def restarts(pod):
            statuses = self.status(pod).get("containerStatuses") or [{}]
            return statuses[0].get("restartCount", 0)

        self.run_until([always, onfail], lambda: min(restarts(always), restarts(onfail)) >= 3, tick=100)
        self.assertEqual(self.status(always)["phase"], "Running")
        state = self.status(onfail)["containerStatuses"][0]
        self.assertEqual(state["lastState"]["terminated"]["exitCode"], 1)
        self.assertEqual(self.status(onfail)["phase"], "Running")
        onfail_ok = self.pod("onfail-ok", ["ok"], "OnFailure")
        self.run_until([onfail_ok], lambda: self.status(onfail_ok).get("phase") == "Succeeded")
        self.assertEqual(restarts(onfail_ok), 0)

    def test_bad_image_and_dns_wait(self):
        bad = self.pod("img", ["ok"])
        bad["spec"]["containers"][0]["image"] = "busybox"
        dns = self.pod("dns", ["ok"])
        dns["spec"]["containers"][0]["args"] = ["--addr", "srv.ns.svc:1"]
        waiting = lambda p: self.status(p).get("containerStatuses", [{}])[0].get("state", {}).get("waiting", {})  # noqa
        self.run_until([bad, dns], lambda: waiting(bad).get("reason") == "ErrImagePull"
                       and "srv.ns.svc" in waiting(dns).get("message", ""))
        self.assertEqual(self.status(dns)["phase"], "Pending")
        server = make_pod("srv-0", labels={"app": "srv"}, ip="127.9.0.99")
        self.clock.t += 1
        self.run_until([bad, dns, server], lambda: self.status(dns).get("phase") == "Succeeded",
                       services=[make_service("srv", selector={"app": "srv"})])
        with open(os.path.join(self.kubelet.pods[dns["metadata"]["uid"]].sandbox, "cmdline.json")) as f:
            self.assertEqual(json.load(f)["argv"][1:], ["--addr", "127.9.0.99:1"])

    def test_python_worker_with_rendezvous_env(self):
        """A PyTorch worker: the image's Python runs the example under /opt/antdt, and MASTER_ADDR (an
        env value naming worker-0 by hostname.subdomain) waits for worker-0's IP, as args do."""
        root = os.path.join(self.tmp.name, "image")
        os.makedirs(os.path.join(root, "examples"))
        with open(os.path.join(root, "examples", "probe.py"), "w") as f:
            f.write("import json, os, sys\n"
                    "names = ('MASTER_ADDR', 'RANK', 'PYTHONPATH', 'PYTHONDONTWRITEBYTECODE')\n"
                    "json.dump({k: os.environ.get(k) for k in names}, sys.stdout)\n")
        self.kubelet.image_root = root
        worker = self.pod("w-1-2", ["python3"], labels={"role": "worker"}, hostname="w-1", subdomain="w")
        container = worker["spec"]["containers"][0]
        container["args"] = ["/opt/antdt/examples/probe.py"]
        container["env"] = [{"name": "MASTER_ADDR", "value": "w-0.w.ns.svc"}, {"name": "RANK", "value": "1"},
                            {"name": "PYTHONPATH", "value": "/extra"}]
        services = [make_service("w", selector={"role": "worker"})]
        waiting = lambda: self.status(worker).get("containerStatuses", [{}])[0].get("state", {}).get("waiting", {})  # noqa
        self.run_until([worker], lambda: "w-0.w.ns.svc" in waiting().get("message", ""), services=services)
        rank0 = make_pod("w-0-0", labels={"role": "worker"}, hostname="w-0", subdomain="w", ip="127.9.0.77")
        self.clock.t += 1
        self.run_until([worker, rank0], lambda: self.status(worker).get("phase") == "Succeeded", services=services)
        sandbox = self.kubelet.pods[worker["metadata"]["uid"]].sandbox
        with open(os.path.join(sandbox, "cmdline.json")) as f:
            self.assertEqual(json.load(f)["argv"], [spec.SYSTEM_PYTHON, os.path.join(root, "examples", "probe.py")])
        with open(os.path.join(sandbox, "log")) as f:
            seen = json.load(f)
        self.assertEqual(seen, {"MASTER_ADDR": "127.9.0.77", "RANK": "1",
                                "PYTHONPATH": "/extra:" + spec.sdk_dir(self.bin), "PYTHONDONTWRITEBYTECODE": "1"})

    def test_graceful_deletion_and_disappearance(self):
        slow = self.pod("slow", ["sleep", "600"], "Always")
        other = self.pod("other", ["sleep", "600"], "Always")
        self.run_until([slow, other], lambda: self.status(slow).get("phase") == "Running"
                       and self.status(other).get("phase") == "Running")
        proc = self.kubelet.pods[slow["metadata"]["uid"]].proc
        slow["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
        slow["metadata"]["deletionGracePeriodSeconds"] = 30
        self.run_until([slow, other], lambda: any(m == "DELETE" for m, _, _ in self.api.calls))
        self.assertIsNotNone(proc.poll())  # sleep dies of SIGTERM
        method, path, body = [c for c in self.api.calls if c[0] == "DELETE"][0]
        self.assertEqual(path, "/api/v1/namespaces/ns/pods/slow")
        self.assertEqual(body["gracePeriodSeconds"], 0)
        self.assertEqual(body["preconditions"]["uid"], slow["metadata"]["uid"])
        other_proc = self.kubelet.pods[other["metadata"]["uid"]].proc
        self.kubelet.sync([], [])  # both objects gone
        self.assertEqual(other_proc.returncode, -signal.SIGKILL)
        self.assertEqual(self.kubelet.pods, {})


class FakeWatchResponse:
    def __init__(self, events):
        self.events = events

    def stream(self, amt=None, decode_content=False):
        for event in self.events:
            if isinstance(event, Exception):
                raise event
            data = (json.dumps(event) + "\n").encode()
            yield data[:7]  # events split across chunks
            yield data[7:]

    def release_conn(self):
        pass


class FakeListWatchApi:
    """Serves scripted LIST answers and watch streams; records the watch resourceVersions."""

    def __init__(self, lists, watches):
        self.lists = lists
        self.watches = watches
        self.watch_rvs = []
        self.done = threading.Event()

    def request(self, method, path, body=None, query=None):
        return self.lists.pop(0)

    def raw(self, method, path, body=None, query=None, timeout=None):
        self.watch_rvs.append(query["resourceVersion"])
        if not self.watches:
            self.done.set()
            time.sleep(0.05)
            return FakeWatchResponse([])
        events = self.watches.pop(0)
        if isinstance(events, Exception):
            raise events
        return FakeWatchResponse(events)


def obj(name, rv):
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}


class InformerTest(unittest.TestCase):
    def test_relist_on_410_replaces_the_cache_and_drops_resume(self):
        import urllib3
        lists = [{"metadata": {"resourceVersion": "5"}, "items": [obj("a", 1), obj("b", 2)]},
                 {"metadata": {"resourceVersion": "20"}, "items": [obj("a", 1), obj("c", 6)]},
                 {"metadata": {"resourceVersion": "30"}, "items": [obj("c", 6), obj("d", 25)]}]
        watches = [
            [{"type": "ADDED", "object": obj("c", 6)}, {"type": "BOOKMARK", "object": obj("", 9)},
             {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}],
            [{"type": "DELETED", "object": obj("a", 21)}, urllib3.exceptions.ProtocolError("connection reset")],
            [{"type": "MODIFIED", "object": obj("c", 22)}],  # resumes from 21, then ends normally
            ApiException(status=410, reason="Gone"),  # plain 410 on the watch request
        ]
        api = FakeListWatchApi(lists, watches)
        changes = []
        informer = Informer(api, "/api/v1/pods", lambda: changes.append(1), "test")
        informer.start()
        self.assertTrue(api.done.wait(30))
        informer.stop()
        self.assertEqual(sorted(o["metadata"]["name"] for o in informer.items()), ["c", "d"])
        self.assertEqual(api.watch_rvs[:5], ["5", "20", "21", "22", "30"])
        self.assertTrue(changes)


# ---------------------------------------------------------------------------------------------
# End to end against the emulator


BIN_DIR = os.environ.get("ANTDT_BIN_DIR", os.path.join(HERE, "..", "..", "build", "bin"))
EMULATOR = os.environ.get("ANTDT_KUBE_EMULATOR", os.path.join(BIN_DIR, "antdt-kube-emulator"))


def wait_for(predicate, what, timeout=60, alive=()):
    """Polls predicate until truthy; fails early if a process in `alive` has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in alive:
            if proc.poll() is not None:
                raise AssertionError("%s exited (%s) while waiting for %s" % (proc.args[0], proc.returncode, what))
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out waiting for " + what)


def read_ready(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


class EndToEndTest(unittest.TestCase):
    """Emulator + kubelet with 3 nodes; pods created with python3-kubernetes."""

    @classmethod
    def setUpClass(cls):
        from kubernetes import client
        cls.client = client
        cls.tmp = tempfile.TemporaryDirectory(prefix="kubelet-test-")
        cls.work = cls.tmp.name
        cls.procs = []
        cls.plane = None
        if REAL:
            cls.plane = acp.ControlPlane(work_dir=os.path.join(cls.work, "control-plane")).start()
            print("control plane %s ready in %.1f s" % (cls.plane.version, cls.plane.start_seconds), file=sys.stderr)
            ip_base = cls.ip_base()
            a, b, c = ip_base.split(".")
            for i, node in enumerate(("node-a", "node-b", "node-c")):
                cls.plane.node_kubeconfig(node, "%s.%s.%d.%d" % (a, b, int(c) + 1, i + 1))
            target = ["--kubeconfig", cls.plane.kubeconfig, "--node-credentials", cls.plane.dir,
                      "--scheduler", "none", "--node-leases"]
        else:
            if not os.access(EMULATOR, os.X_OK):
                raise AssertionError("%s is not built (cmake --build ... --target antdt-kube-emulator)" % EMULATOR)
            emulator_ready = os.path.join(cls.work, "emulator.ready")
            cls.start([EMULATOR, "--listen", "127.0.0.1:0", "--ready-file", emulator_ready], "emulator.log")
            address = wait_for(lambda: read_ready(emulator_ready), "the emulator", alive=cls.procs).splitlines()[0]
            cls.server = "http://" + address
            target = ["--server", cls.server]
        with open(os.path.join(cls.work, "nodes.yaml"), "w") as f:
            f.write("- {name: node-a, labels: {antdt.io/hardware: a100}}\n"
                    "- {name: node-b, labels: {antdt.io/hardware: a100}}\n"
                    "- {name: node-c, labels: {antdt.io/hardware: v100}}\n")
        ip_base = cls.ip_base()
        kubelet_ready = os.path.join(cls.work, "kubelet.ready")
        cls.start(["/usr/bin/python3", os.path.join(HERE, "antdt_test_kubelet.py"), *target,
                   "--nodes", os.path.join(cls.work, "nodes.yaml"), "--bin-dir", BIN_DIR,
                   "--work-dir", os.path.join(cls.work, "kubelet"), "--ip-base", ip_base,
                   "--ready-file", kubelet_ready, "--agent-monitor", "127.0.0.1:1",
                   "--speed-dir", os.path.join(cls.work, "speed")], "kubelet.log")
        wait_for(lambda: read_ready(kubelet_ready), "the kubelet", alive=cls.procs)
        if REAL:
            from kubernetes import config as kconfig
            cls.core = client.CoreV1Api(kconfig.new_client_from_config(config_file=cls.plane.kubeconfig))
        else:
            configuration = client.Configuration()
            configuration.host = cls.server
            cls.core = client.CoreV1Api(client.ApiClient(configuration))
        cls.ns = "e2e"
        cls.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=cls.ns)))

    @classmethod
    def ip_base(cls):
        return "127.%d.%d" % (100 + os.getpid() % 100, (os.getpid() // 100) % 50 * 2)

    @classmethod
    def start(cls, argv, log_name):
        log = open(os.path.join(cls.work, log_name), "wb")
        cls.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
        log.close()

    @classmethod
    def tearDownClass(cls):
        children = cls.child_pids()
        for proc in reversed(cls.procs):  # the kubelet first: it kills its pods and agents
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        kubelet_rc = cls.procs[-1].returncode if cls.procs and (len(cls.procs) > 1 or REAL) else None
        if cls.plane:
            cls.plane.stop()
        survivors = [pid for pid in children if os.path.exists("/proc/%d" % pid) and not _zombie(pid)]
        for pid in survivors:  # only processes the kubelet started for this test
            os.kill(pid, signal.SIGKILL)
        if kubelet_rc != 0 or survivors or os.environ.get("ANTDT_KUBELET_TEST_LOGS"):
            for name in ("kubelet.log", "emulator.log", "control-plane/kube-apiserver.log"):
                if not os.path.exists(os.path.join(cls.work, name)):
                    continue
                with open(os.path.join(cls.work, name), errors="replace") as f:
                    sys.stderr.write("---- %s (tail)\n%s\n" % (name, f.read()[-8000:]))
        cls.tmp.cleanup()
        if kubelet_rc != 0:
            raise AssertionError("the kubelet exited %s on SIGTERM" % kubelet_rc)
        if survivors:
            raise AssertionError("processes outlived the kubelet: %s" % survivors)

    @classmethod
    def child_pids(cls):
        """Every pod and agent pid the kubelet logged."""
        with open(os.path.join(cls.work, "kubelet.log"), errors="replace") as f:
            return [int(line.split(" pid=")[1].split()[0]) for line in f if " pid=" in line]

    def emulator_control(self, method, what, body=None):
        if REAL:
            self.skipTest("faults are injected through the emulator's control endpoint")
        import urllib.request
        request = urllib.request.Request(self.server + "/emulator/v1/" + what, method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            data = response.read()
            return json.loads(data) if data else None

    def wait(self, predicate, what, timeout=60):
        return wait_for(predicate, what, timeout, alive=self.procs)

    def pod_body(self, name, command, args=(), restart="Never", labels=None, **spec_extra):
        c = self.client
        container = c.V1Container(
            name="main", image="antdt/antdt:dev", command=[command], args=list(args),
            env=[c.V1EnvVar(name="POD_IP", value_from=c.V1EnvVarSource(
                field_ref=c.V1ObjectFieldSelector(field_path="status.podIP")))])
        return c.V1Pod(metadata=c.V1ObjectMeta(name=name, labels=labels or {}),
                       spec=c.V1PodSpec(containers=[container], restart_policy=restart, **spec_extra))

    def create_pod(self, *args, **kwargs):
        return self.core.create_namespaced_pod(self.ns, self.pod_body(*args, **kwargs))

    def pod(self, name):
        try:
            return self.core.read_namespaced_pod(name, self.ns)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def wait_phase(self, name, phases, timeout=60):
        return self.wait(lambda: (lambda p: p if p and p.status and p.status.phase in phases else None)(
            self.pod(name)), "pod %s in %s" % (name, phases), timeout)

    def sandbox(self, pod):
        return os.path.join(self.work, "kubelet", "pods", "%s_%s_%s" % (self.ns, pod.metadata.name, pod.metadata.uid))

    def test_nodes_registered(self):
        nodes = {n.metadata.name: n for n in self.core.list_node().items}
        self.assertTrue({"node-a", "node-b", "node-c"} <= set(nodes))
        node = nodes["node-c"]
        self.assertEqual(node.metadata.labels["kubernetes.io/hostname"], "node-c")
        self.assertEqual(node.metadata.labels["antdt.io/hardware"], "v100")
        self.assertEqual([c.status for c in node.status.conditions if c.type == "Ready"], ["True"])
        self.assertEqual([a.type for a in node.status.addresses][0], "InternalIP")
        if REAL:
            # Its heartbeat renewed, the node-lifecycle controller lifts the not-ready taint
            # that admission put on the new Node, so the real scheduler uses it.
            from kubernetes import client
            leases = client.CoordinationV1Api(self.core.api_client)
            self.assertEqual(leases.read_namespaced_lease("node-c", "kube-node-lease").spec.holder_identity, "node-c")
            self.wait(lambda: not (self.core.read_node("node-c").spec.taints or []), "node-c's taints lifted")

    def test_kubectl_logs_through_the_api_server(self):
        if not REAL:
            self.skipTest("the emulator serves logs itself (operator_e2e_test)")
        self.create_pod("talker", "antdt-ps", args=["--no-such-flag"])
        pod = self.wait_phase("talker", ["Failed"])
        kubectl = os.path.join(self.plane.bin_dir, "kubectl")
        out = subprocess.run([kubectl, "--kubeconfig", self.plane.kubeconfig, "-n", self.ns, "logs", "talker"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, _read(os.path.join(self.sandbox(pod), "log")))
        self.assertIn("no-such-flag", out.stdout)
        last = subprocess.run([kubectl, "--kubeconfig", self.plane.kubeconfig, "-n", self.ns, "logs", "talker",
                               "--tail=1"], capture_output=True, text=True, timeout=60)
        self.assertEqual(last.returncode, 0, last.stderr)
        self.assertEqual(last.stdout.count("\n"), 1, last.stdout)
        self.assertTrue(out.stdout.endswith(last.stdout))

    def test_a_node_may_not_touch_another_nodes_objects(self):
        if not REAL:
            self.skipTest("the Node authorizer and NodeRestriction are the real API server's")
        from kubernetes import client, config as kconfig
        as_a = client.CoreV1Api(kconfig.new_client_from_config(
            config_file=os.path.join(self.plane.dir, "node-node-a.kubeconfig")))
        with self.assertRaises(ApiException) as ctx:
            as_a.patch_node_status("node-b", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
        self.assertEqual(ctx.exception.status, 403)
        with self.assertRaises(ApiException) as ctx:
            as_a.list_namespaced_pod(self.ns)  # a node lists only its own pods (fieldSelector)
        self.assertEqual(ctx.exception.status, 403)

    def test_service_dns_and_success(self):
        c = self.client
        self.create_pod("client", "antdt-step-worker", restart="Never",
                        args=["--agent", "shards.%s.svc:50051" % self.ns, "--job", "j", "--worker-id", "w0",
                              "--steps", "3", "--bpt", "0.01"])

        def waiting_for_dns():
            pod = self.pod("client")
            statuses = pod.status.container_statuses or []
            waiting = statuses[0].state.waiting if statuses else None
            return (pod.status.phase == "Pending" and waiting and waiting.reason == "ContainerCreating"
                    and "shards.%s.svc" % self.ns in (waiting.message or "") and pod.status.pod_ip)

        self.wait(waiting_for_dns, "the client waiting for its DNS name")
        self.core.create_namespaced_service(self.ns, c.V1Service(
            metadata=c.V1ObjectMeta(name="shards"),
            spec=c.V1ServiceSpec(cluster_ip="None", selector={"app": "shards"},
                                 ports=[c.V1ServicePort(name="grpc", port=50051)])))
        state_dir = os.path.join(self.work, "shard-state")
        self.create_pod("shards-0", "antdt-sharding-service", labels={"app": "shards"}, restart="Always",
                        args=["--listen", "$(POD_IP):50051", "--state-dir", state_dir, "--auth", "none"])
        server = self.wait_phase("shards-0", ["Running"])
        self.assertTrue(server.status.pod_ip and server.status.host_ip)
        self.assertIsNotNone(server.status.container_statuses[0].state.running)
        self.assertEqual({cond.type: cond.status for cond in server.status.conditions},
                         {"PodScheduled": "True", "Initialized": "True", "ContainersReady": "True", "Ready": "True"})
        client_pod = self.wait_phase("client", ["Succeeded", "Failed"])
        self.assertEqual(client_pod.status.phase, "Succeeded")
        self.assertEqual(client_pod.status.container_statuses[0].state.terminated.exit_code, 0)
        with open(os.path.join(self.sandbox(client_pod), "cmdline.json")) as f:
            cmdline = json.load(f)
        self.assertIn(server.status.pod_ip + ":50051", cmdline["argv"])
        self.assertEqual(cmdline["argv"][0], os.path.realpath(os.path.join(BIN_DIR, "antdt-step-worker")))
        self.assertEqual(cmdline["env"]["POD_IP"], client_pod.status.pod_ip)
        self.assertEqual(cmdline["env"]["ANTDT_NODE_SPEED_FILE"],
                         os.path.join(self.work, "speed", client_pod.spec.node_name + ".speed"))
        self.assertIn("event=serving", self.wait(lambda: _read(os.path.join(self.sandbox(server), "log")),
                                                "the server's log"))

    def test_agents_listen_on_host_ips(self):
        for node in self.core.list_node().items:
            if node.metadata.name.startswith("node-"):
                ip = [a.address for a in node.status.addresses if a.type == "InternalIP"][0]
                self.wait(lambda: _connects(ip, 9400), "the agent of %s on %s:9400" % (node.metadata.name, ip))

    def test_survives_watch_faults_and_api_errors(self):
        if REAL:
            self.skipTest("faults are injected through the emulator's control endpoint")
        self.create_pod("survivor", "antdt-sharding-service", restart="Always",
                        args=["--listen", "$(POD_IP):50051", "--state-dir", os.path.join(self.work, "survivor"),
                              "--auth", "none"])
        pod = self.wait_phase("survivor", ["Running"])
        pid = self.wait(lambda: self._pid_of(pod), "the survivor's pid")
        kubelet_only = {"userAgentContains": "antdt-test-kubelet"}
        try:
            # Watches cut and not re-established while the pod is deleted outright and history compacted:
            # only a relist that diffs the cache can notice.
            self.emulator_control("POST", "faults", {"inject": dict(kubelet_only, code=503, count=1000,
                                                                    verbs=["WATCH"])})
            self.emulator_control("POST", "faults", {"dropWatches": True})
            self.core.delete_namespaced_pod("survivor", self.ns, grace_period_seconds=0)
            self.emulator_control("POST", "faults", {"compact": True})
            self.wait(lambda: not os.path.exists("/proc/%d" % pid) or _zombie(pid), "the survivor killed")
            self.emulator_control("DELETE", "faults")
            # Conflicts and throttling on the kubelet's writes.
            self.emulator_control("DELETE", "requests")
            self.emulator_control("POST", "faults", {"inject": dict(kubelet_only, code=409, count=2, verbs=["PUT"])})
            self.emulator_control("POST", "faults", {"inject": dict(kubelet_only, code=429, count=2, verbs=["POST"],
                                                                    retryAfterSeconds=1)})
            self.create_pod("after-faults", "antdt-agent", args=["--help"])
            self.assertEqual(self.wait_phase("after-faults", ["Succeeded", "Failed"]).status.phase, "Succeeded")
            codes = {r["code"] for r in self.emulator_control("GET", "requests")
                     if "antdt-test-kubelet" in r.get("userAgent", "")}
            self.assertTrue({409, 429} <= codes, codes)
        finally:
            self.emulator_control("DELETE", "faults")

    def test_node_affinity_not_in(self):
        c = self.client
        names = ["node-a", "node-b"]
        term = c.V1NodeSelectorTerm(match_expressions=[
            c.V1NodeSelectorRequirement(key="kubernetes.io/hostname", operator="NotIn", values=names)])
        affinity = c.V1Affinity(node_affinity=c.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=c.V1NodeSelector(node_selector_terms=[term])))
        self.create_pod("placed", "antdt-agent", args=["--help"], affinity=affinity)
        self.assertEqual(self.wait_phase("placed", ["Succeeded", "Failed"]).spec.node_name, "node-c")
        self.create_pod("nowhere", "antdt-agent", args=["--help"], node_selector={"antdt.io/hardware": "tpu"})
        self.wait(lambda: any(cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable"
                             for cond in (self.pod("nowhere").status.conditions or [])), "Unschedulable")
        self.assertFalse(self.pod("nowhere").spec.node_name)

    def test_failure_with_restart_never(self):
        self.create_pod("bad-flags", "antdt-ps", args=["--no-such-flag"])
        pod = self.wait_phase("bad-flags", ["Succeeded", "Failed"])
        self.assertEqual(pod.status.phase, "Failed")
        terminated = pod.status.container_statuses[0].state.terminated
        self.assertEqual((terminated.exit_code, terminated.reason), (2, "Error"))

    def test_refused_image(self):
        body = self.pod_body("foreign", "sh", args=["-c", "true"])
        body.spec.containers[0].image = "busybox:1"
        self.core.create_namespaced_pod(self.ns, body)
        self.wait(lambda: (lambda p: p.status.container_statuses and p.status.container_statuses[0].state.waiting
                          and p.status.container_statuses[0].state.waiting.reason == "ErrImagePull")(self.pod("foreign")),
                 "ErrImagePull")
        self.assertEqual(self.pod("foreign").status.phase, "Pending")

    def test_delete_running_pod(self):
        self.create_pod("victim", "antdt-sharding-service", restart="Always",
                        args=["--listen", "$(POD_IP):50051", "--state-dir", os.path.join(self.work, "victim-state"),
                              "--auth", "none"])
        pod = self.wait_phase("victim", ["Running"])
        pid = self.wait(lambda: self._pid_of(pod), "the victim's pid")
        self.core.delete_namespaced_pod("victim", self.ns)
        self.wait(lambda: self.pod("victim") is None, "the pod object removed")
        self.wait(lambda: not os.path.exists("/proc/%d" % pid) or _zombie(pid), "the process gone")

    def _pid_of(self, pod):
        with open(os.path.join(self.work, "kubelet.log"), errors="replace") as f:
            for line in f:
                if "event=container_started" in line and "pod=%s/%s " % (self.ns, pod.metadata.name) in line:
                    return int(line.split(" pid=")[1].split()[0])
        return None


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _connects(ip, port):
    import socket
    try:
        with socket.create_connection((ip, port), timeout=1):
            return True
    except OSError:
        return False


def _zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


if __name__ == "__main__":
    if REAL:
        acp.exit_skipped_unless_built()
        unittest.main(verbosity=2, defaultTest="EndToEndTest")
    unittest.main(verbosity=2)
