#!/usr/bin/python3
"""The real control plane harness: starts, serves the AntDTJob CRD, stops clean.

One control plane (the harness's `run` program, as the C++ and shell tests use it)
for the applying tests; more for the ways it can end (SIGTERM, SIGKILL of the
supervisor, and a shared plane's `start`/`stop` and watched process). Exits 77 (SKIPPED) when the binaries are not built.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import antdt_control_plane as acp  # noqa: E402

SRC = acp.SOURCE_DIR
HARNESS = os.path.join(HERE, "antdt_control_plane.py")


def start_plane(work):
    """Starts the harness program; returns (process, ready info)."""
    ready = os.path.join(work, "ready.json")
    log = open(os.path.join(work, "harness.log"), "wb")
    proc = subprocess.Popen([sys.executable, HARNESS, "run", "--dir", os.path.join(work, "cp"),
                             "--ready-file", ready], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and proc.poll() is None and not os.path.exists(ready):
        time.sleep(0.1)
    if not os.path.exists(ready):
        proc.kill()
        proc.wait()
        with open(os.path.join(work, "harness.log")) as f:
            raise AssertionError("the control plane did not start:\n" + f.read()[-4000:])
    with open(ready) as f:
        return proc, json.load(f)


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def port_open(url):
    host, port = url.rsplit("//", 1)[-1].rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port.rstrip("/")))) == 0


def wait_gone(info, timeout=15):
    """Every component process gone and the API server's port closed, within TIMEOUT s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [name for name, pid in info["pids"].items() if pid_alive(pid)]
        if not alive and not port_open(info["server"]):
            return []
        time.sleep(0.1)
    return alive or ["the port of " + info["server"]]


class ControlPlaneTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="control-plane-test.")
        cls.proc, cls.info = start_plane(cls.work)
        print("control plane %s ready in %.1f s at %s" % (cls.info["version"], cls.info["start_seconds"],
                                                        cls.info["server"]), file=sys.stderr)
        cls.kubectl = os.path.join(cls.info["bin_dir"], "kubectl")

    @classmethod
    def tearDownClass(cls):
        cls.proc.send_signal(signal.SIGTERM)
        cls.proc.wait(30)
        left = wait_gone(cls.info)
        shutil.rmtree(cls.work, ignore_errors=True)
        assert not left, "left running after SIGTERM: %s" % left

    def k(self, *args, check=True, kubectl=None):
        out = subprocess.run([kubectl or self.kubectl, "--kubeconfig", self.info["kubeconfig"],
                              "--request-timeout=30s", *args], capture_output=True, text=True, timeout=90)
        if check and out.returncode != 0:
            self.fail("kubectl %s: %s%s" % (" ".join(args), out.stdout, out.stderr))
        return out

    def test_a_version_is_the_built_release(self):
        out = self.k("version", "-o", "json")
        version = json.loads(out.stdout)
        self.assertEqual(version["serverVersion"]["gitVersion"], self.info["version"])
        self.assertRegex(self.info["version"], r"^v1\.(3[4-9]|[4-9][0-9])\.")
        self.assertEqual(version["clientVersion"]["gitVersion"], self.info["version"])

    def test_b_crd_job_and_explain(self):
        self.k("apply", "-f", os.path.join(SRC, "crds", "antdt.io_antdtjobs.yaml"))
        self.k("wait", "--for=condition=established", "--timeout=60s", "crd/antdtjobs.antdt.io")
        self.k("create", "namespace", "harness")
        # Discovery of a CRD just established can lag a moment behind.
        for _ in range(50):
            if self.k("explain", "antdtjob.spec", check=False).returncode == 0:
                break
            time.sleep(0.2)
        explain = self.k("explain", "antdtjob.spec").stdout
        for field in ("dataset", "workers", "stragglerPolicy", "monitor"):
            self.assertIn(field, explain)
        self.k("-n", "harness", "apply", "-f", os.path.join(SRC, "examples", "jobs", "quickstart.yaml"))
        job = json.loads(self.k("-n", "harness", "get", "adt", "quickstart", "-o", "json").stdout)
        self.assertEqual(job["spec"]["workers"]["replicas"], 4)
        self.assertIs(job["spec"]["suspend"], False, "the CRD's default was not applied")
        table = self.k("-n", "harness", "get", "adt").stdout
        for column in ("NAME", "READY", "WORKERS", "PROGRESS", "STRAGGLERS", "AGE"):
            self.assertIn(column, table.splitlines()[0])

    def test_c_cel_rule_refused_by_the_real_server(self):
        with open(os.path.join(SRC, "examples", "jobs", "quickstart.yaml")) as f:
            text = f.read().replace("name: quickstart", "name: tiny-batch", 1)
        text = text.replace("  workers:\n    replicas: 4", "  model:\n    globalBatchSize: 2\n  workers:\n    replicas: 4")
        path = os.path.join(self.work, "tiny-batch.yaml")
        with open(path, "w") as f:
            f.write(text)
        self.k("apply", "-f", os.path.join(SRC, "crds", "antdt.io_antdtjobs.yaml"))
        self.k("wait", "--for=condition=established", "--timeout=60s", "crd/antdtjobs.antdt.io")
        out = self.k("-n", "default", "apply", "-f", path, check=False)
        self.assertNotEqual(out.returncode, 0, out.stdout)
        self.assertIn("spec.model.globalBatchSize", out.stderr)
        self.assertIn("must be >= spec.workers.replicas", out.stderr)
        self.assertNotEqual(self.k("-n", "default", "get", "adt", "tiny-batch", check=False).returncode, 0)

    def test_d_controllers_and_scheduler_run(self):
        # The controller-manager made the namespace's service account; the scheduler
        # marks a pod that fits no node (there is none) Unschedulable.
        self.k("-n", "default", "get", "serviceaccount", "default")
        self.k("-n", "default", "run", "nowhere", "--image=antdt/antdt:0.1.0", "--restart=Never")
        for _ in range(100):
            pod = json.loads(self.k("-n", "default", "get", "pod", "nowhere", "-o", "json").stdout)
            conditions = {c["type"]: c for c in pod["status"].get("conditions", [])}
            if conditions.get("PodScheduled", {}).get("reason") == "Unschedulable":
                break
            time.sleep(0.2)
        self.assertEqual(conditions.get("PodScheduled", {}).get("reason"), "Unschedulable", pod["status"])


class EndingTest(unittest.TestCase):
    def test_supervisor_killed_leaves_nothing(self):
        work = tempfile.mkdtemp(prefix="control-plane-kill.")
        try:
            proc, info = start_plane(work)
            proc.kill()
            proc.wait()
            self.assertEqual(wait_gone(info), [])
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def test_shared_plane_outlives_its_starter_and_stops_with_the_watched_process(self):
        """`start` (a ctest fixture's setup) returns once the plane is ready and leaves it
        running; it stops when the watched process (ctest) goes, or on `stop` (the
        fixture's cleanup); `stop` ends nothing but the plane it started there."""
        work = tempfile.mkdtemp(prefix="control-plane-shared.")
        watched = subprocess.Popen(["sleep", "600"])
        try:
            plane_dir = os.path.join(work, "cp")
            out = subprocess.run([sys.executable, HARNESS, "start", "--dir", plane_dir,
                                  "--watch-pid", str(watched.pid)], capture_output=True, text=True, timeout=400)
            self.assertEqual(out.returncode, 0, out.stderr)
            info = json.loads(out.stdout)
            self.assertEqual(info["version"], "v1.37.2")
            time.sleep(1)
            self.assertTrue(port_open(info["server"]), "the plane did not outlive `start`")
            self.assertTrue(all(pid_alive(pid) for pid in info["pids"].values()))
            # A stale pid file naming another process: `stop` leaves that process be.
            stale = os.path.join(work, "stale")
            os.makedirs(stale)
            with open(os.path.join(stale, "run.pid"), "w") as f:
                f.write("%d\n" % watched.pid)
            subprocess.run([sys.executable, HARNESS, "stop", "--dir", stale], check=True, timeout=60)
            self.assertTrue(pid_alive(watched.pid))
            # The watched process goes: so does the plane.
            watched.kill()
            watched.wait()
            self.assertEqual(wait_gone(info, timeout=20), [])
            # Started again in the same folder (fresh), ended by `stop`.
            out = subprocess.run([sys.executable, HARNESS, "start", "--dir", plane_dir],
                                 capture_output=True, text=True, timeout=400)
            self.assertEqual(out.returncode, 0, out.stderr)
            info = json.loads(out.stdout)
            self.assertTrue(port_open(info["server"]))
            subprocess.run([sys.executable, HARNESS, "stop", "--dir", plane_dir], check=True, timeout=60)
            self.assertEqual(wait_gone(info), [])
            self.assertFalse(os.path.exists(os.path.join(plane_dir, "run.pid")))
        finally:
            if watched.poll() is None:
                watched.kill()
                watched.wait()
            subprocess.run([sys.executable, HARNESS, "stop", "--dir", os.path.join(work, "cp")], timeout=60)
            shutil.rmtree(work, ignore_errors=True)

    def test_missing_binaries_name_what_is_missing(self):
        out = subprocess.run([sys.executable, HARNESS, "run", "--dir", "/nonexistent",
                              "--bin-dir", "/nonexistent/bin"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, acp.SKIP)
        self.assertIn("SKIPPED", out.stderr)
        self.assertIn("/nonexistent/bin/etcd", out.stderr)
        self.assertIn("scripts/build-k8s.sh", out.stderr)


if __name__ == "__main__":
    acp.exit_skipped_unless_built()
    unittest.main(verbosity=2)
