#!/usr/bin/python3
"""The real control plane beside the API-server emulator, measured in one run.

  /usr/bin/python3 bench/control_plane_bench.py [--starts 3] [--jobs 30] [--nodes 6] [--records 1200]

1. Start-up: the real control plane (etcd, kube-apiserver, kube-controller-manager,
   kube-scheduler: testing/control-plane) until /readyz and the default service account,
   against antdt-kube-emulator until its ready file; the median of --starts each.
2. Load: --jobs AntDTJobs applied at once (each 2 workers, 1 parameter server and its
   sharding service: 4 pods), one antdt-operator, the test kubelet with --nodes nodes, on
   each backend: the time until every job Succeeded, the API requests per job (the real
   server's audit log; the emulator's request log), the operator's CPU seconds and peak RSS.

Figures on stdout, a ratio real / emulator for each; docs/kubernetes.md keeps them.
Needs a build (build/bin) and scripts/build-k8s.sh's binaries."""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SRC, "testing", "control-plane"))
import antdt_control_plane as acp  # noqa: E402

BIN = os.environ.get("ANTDT_BIN_DIR", os.path.join(SRC, "build", "bin"))


def wait_file(path, timeout, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.path.getsize(path):
            with open(path) as f:
                return f.read()
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("%s exited %s" % (proc.args[0], proc.returncode))
        time.sleep(0.05)
    raise RuntimeError("no %s after %d s" % (path, timeout))


def start_emulator(work):
    ready = os.path.join(work, "emulator.ready")
    proc = subprocess.Popen([os.path.join(BIN, "antdt-kube-emulator"), "--listen", "127.0.0.1:0",
                             "--ready-file", ready, "--pod-logs-dir", os.path.join(work, "kubelet", "pods")],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "emulator.log"), "wb"))
    address = wait_file(ready, 30, proc).splitlines()[0]
    kubeconfig = os.path.join(work, "kubeconfig")
    with open(kubeconfig, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "emu",
                   "clusters": [{"name": "emu", "cluster": {"server": "http://" + address}}],
                   "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "u", "namespace": "default"}}],
                   "users": [{"name": "u", "user": {}}]}, f)
    return proc, address, kubeconfig


def startup(starts):
    real, emulated = [], []
    for _ in range(starts):
        with acp.ControlPlane() as plane:
            real.append(plane.start_seconds)
        work = tempfile.mkdtemp(prefix="cp-bench-emu.")
        t0 = time.monotonic()
        proc, _, _ = start_emulator(work)
        emulated.append(time.monotonic() - t0)
        proc.terminate()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    return statistics.median(real), statistics.median(emulated)


def job_manifest(i, records, checkpoints):
    import yaml
    with open(os.path.join(SRC, "examples", "k8s", "quickstart.yaml")) as f:
        job = yaml.safe_load(f)
    name = "load-%02d" % i
    job["metadata"] = {"name": name, "namespace": "default"}
    spec = job["spec"]
    spec["dataset"].update({"records": records, "shardSize": 100, "epochs": 1})
    spec["workers"]["replicas"] = 2
    path = os.path.join(checkpoints, name)
    spec.setdefault("checkpoint", {})["path"] = path
    pod = spec["workers"]["template"]["spec"]
    pod.setdefault("volumes", []).append({"name": "checkpoint", "hostPath": {"path": path, "type": "DirectoryOrCreate"}})
    pod["containers"][0].setdefault("volumeMounts", []).append({"name": "checkpoint", "mountPath": path})
    return job


def proc_usage(pid):
    """(CPU seconds, peak RSS in MB) of a live process."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open("/proc/%d/status" % pid) as f:
        hwm = [line for line in f if line.startswith("VmHWM:")][0].split()[1]
    return cpu, int(hwm) / 1024


def load(backend, jobs, nodes, records):
    """Runs `jobs` jobs at once on `backend` ('real' or 'emulator'); its figures."""
    work = tempfile.mkdtemp(prefix="cp-bench-%s." % backend)
    procs, plane = [], None
    ip_base = "127.%d.%d" % (150 + os.getpid() % 50, (os.getpid() // 50) % 50 * 2 + (0 if backend == "real" else 100))
    try:
        if backend == "real":
            plane = acp.ControlPlane(work_dir=os.path.join(work, "cp")).start()
            a, b, c = ip_base.split(".")
            for i in range(nodes):
                plane.node_kubeconfig("node-%d" % i, "%s.%s.%d.%d" % (a, b, int(c) + 1, i + 1))
            kubeconfig = plane.kubeconfig
            target = ["--node-credentials", plane.dir, "--scheduler", "none", "--node-leases",
                      "--provision-volumes"]
        else:
            proc, address, kubeconfig = start_emulator(work)
            procs.append(proc)
            target = []
        kubectl = [os.path.join(acp.find_bin_dir(), "kubectl"), "--kubeconfig", kubeconfig]
        subprocess.run(kubectl + ["apply", "-f", os.path.join(SRC, "crds", "antdt.io_antdtjobs.yaml")],
                       check=True, capture_output=True)
        subprocess.run(kubectl + ["wait", "--for=condition=established", "--timeout=60s",
                                  "crd/antdtjobs.antdt.io"], check=True, capture_output=True)
        ready = os.path.join(work, "operator.ready")
        operator = subprocess.Popen(
            [os.path.join(BIN, "antdt-operator"), "--kubeconfig", kubeconfig, "--listen", "127.0.0.1:0",
             "--metrics-listen", "127.0.0.1:0", "--ready-file", ready, "--identity", "bench",
             "--leader-election-namespace", "default", "--monitor-window", "1s"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "operator.log"), "wb"))
        procs.append(operator)
        monitor = wait_file(ready, 60, operator).splitlines()[0]
        with open(os.path.join(work, "nodes.yaml"), "w") as f:
            for i in range(nodes):
                f.write("- name: node-%d\n" % i)
        kubelet = subprocess.Popen(
            ["/usr/bin/python3", os.path.join(SRC, "testing", "kubelet", "antdt_test_kubelet.py"),
             "--kubeconfig", kubeconfig, *target, "--nodes", os.path.join(work, "nodes.yaml"),
             "--bin-dir", BIN, "--work-dir", os.path.join(work, "kubelet"), "--ip-base", ip_base,
             "--image-root", SRC, "--agent-monitor", monitor, "--ready-file", os.path.join(work, "kubelet.ready")],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "kubelet.log"), "wb"))
        procs.append(kubelet)
        wait_file(os.path.join(work, "kubelet.ready"), 60, kubelet)
        manifests = os.path.join(work, "jobs.json")
        checkpoints = os.path.join(work, "checkpoints")
        with open(manifests, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "List",
                       "items": [job_manifest(i, records, checkpoints) for i in range(jobs)]}, f)
        requests_before = count_requests(backend, plane, address if backend != "real" else None)
        started = time.monotonic()
        subprocess.run(kubectl + ["apply", "-f", manifests], check=True, capture_output=True)
        done = 0
        while time.monotonic() - started < 1800:
            out = subprocess.run(kubectl + ["get", "adt", "-o", "json"], capture_output=True, text=True)
            items = json.loads(out.stdout).get("items", []) if out.returncode == 0 else []
            done = sum(1 for j in items if any(c.get("type") == "Succeeded" and c.get("status") == "True"
                                               for c in (j.get("status") or {}).get("conditions") or []))
            if done == jobs:
                break
            if operator.poll() is not None or kubelet.poll() is not None:
                raise RuntimeError("the operator or the kubelet exited")
            time.sleep(1)
        seconds = time.monotonic() - started
        cpu, rss = proc_usage(operator.pid)
        after = count_requests(backend, plane, address if backend != "real" else None)
        return {"succeeded": done, "seconds": seconds, "requests_per_job": (after[0] - requests_before[0]) / jobs,
                "operator_requests_per_job": (after[1] - requests_before[1]) / jobs,
                "operator_cpu_s": cpu, "operator_rss_mb": rss}
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if plane:
            plane.stop()
        shutil.rmtree(work, ignore_errors=True)


def count_requests(backend, plane, address):
    """API requests served so far: (every client's, the operator's)."""
    if backend == "real":
        total = operator = 0
        with open(plane.audit_log) as f:
            for line in f:
                if '"stage":"ResponseComplete"' in line:
                    total += 1
                    operator += '"userAgent":"antdt-operator/' in line
        return total, operator
    with urllib.request.urlopen("http://%s/emulator/v1/requests" % address, timeout=30) as r:
        log = json.loads(r.read())
    return len(log), sum(1 for e in log if e.get("userAgent", "").startswith("antdt-operator/"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--starts", type=int, default=3)
    p.add_argument("--jobs", type=int, default=30)
    p.add_argument("--nodes", type=int, default=6)
    p.add_argument("--records", type=int, default=1200)
    args = p.parse_args()
    acp.exit_skipped_unless_built()
    real, emulated = startup(args.starts)
    print("start-up (median of %d): real control plane %.1f s, emulator %.2f s, ratio %.0fx"
          % (args.starts, real, emulated, real / emulated), flush=True)
    results = {}
    for backend in ("emulator", "real"):
        results[backend] = r = load(backend, args.jobs, args.nodes, args.records)
        print("%s: %d/%d jobs (%d pods) Succeeded in %.0f s; API requests per job: %.0f from every client, "
              "%.0f from the operator; operator %.1f CPU s, peak RSS %.0f MB"
              % (backend, r["succeeded"], args.jobs, 4 * args.jobs, r["seconds"], r["requests_per_job"],
                 r["operator_requests_per_job"], r["operator_cpu_s"], r["operator_rss_mb"]), flush=True)
    e, r = results["emulator"], results["real"]
    print("real / emulator: time %.2fx, requests per job %.2fx (the operator's %.2fx), operator CPU %.2fx, "
          "operator RSS %.2fx"
          % (r["seconds"] / e["seconds"], r["requests_per_job"] / e["requests_per_job"],
             r["operator_requests_per_job"] / max(e["operator_requests_per_job"], 1e-9),
             r["operator_cpu_s"] / max(e["operator_cpu_s"], 1e-9), r["operator_rss_mb"] / e["operator_rss_mb"]))


if __name__ == "__main__":
    main()
