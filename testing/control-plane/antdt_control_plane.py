#!/usr/bin/python3
"""A real Kubernetes control plane on 127.0.0.1 for AntDT's tests.

Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler (built from
Go modules by scripts/build-k8s.sh) the way controller-runtime's envtest and
kubernetes' hack/local-up-cluster.sh do: a CA of its own (openssl), the secure port
only, client certificates for every user, the RBAC and Node authorizers with
NodeRestriction, service-account tokens signed with a key it makes. Writes an admin
kubeconfig, waits for /readyz, and stops everything again, on failure too: every
component gets PR_SET_PDEATHSIG=SIGKILL, and the supervisor (the `run` command)
stops when its own parent goes away.

As a library (Python tests):
    with ControlPlane(bin_dir, work_dir) as cp:
        cp.kubeconfig                      # admin (system:masters)
        cp.user_kubeconfig("alice", ["dev"])
        cp.node_kubeconfig("node-a")       # system:node:node-a, group system:nodes

As a program (C++ and shell tests):
    antdt_control_plane.py run --dir D [--ready-file F] [--bin-dir B]
        runs until SIGTERM/SIGINT or its parent's exit; F gets one JSON line once
        /readyz answers ok: {"server", "kubeconfig", "version", "start_seconds", ...}
    antdt_control_plane.py kubeconfig --dir D --user U [--group G]... --out F
        a client certificate and kubeconfig for another user of a running plane
    antdt_control_plane.py kubeconfig --dir D --node N [--serving-ip IP]
        node credentials (D/node-N.kubeconfig; with an IP, D/node-N-serving.crt and .key)
    antdt_control_plane.py start --dir D [--watch-pid P] [--bin-dir B]
        a plane shared by several test processes (a ctest fixture's setup): runs `run`
        detached in D (D/run.pid, D/run.log, D/ready.json), waits until it is ready,
        prints its ready line and returns; the plane stops with `stop`, or by itself
        once process P (default: start's parent, e.g. ctest) is gone
    antdt_control_plane.py stop --dir D
        stops the plane `start` left running in D (the fixture's cleanup)
    antdt_control_plane.py bin-dir
        where the binaries are; exit 77 (a test's SKIPPED) naming what is missing

Exit codes: 0 stopped cleanly, 1 a component failed (its log tail on stderr),
77 the binaries are not built.
"""

import argparse
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class MissingBinaries(Exception):
    """The control plane's binaries are not (fully) built."""


def find_bin_dir(bin_dir=None):
    """The folder with the binaries: bin_dir, $ANTDT_K8S_BIN_DIR, or build-k8s.sh's.

    Raises MissingBinaries naming what is missing and how to build it."""
    if not bin_dir:
        bin_dir = os.environ.get("ANTDT_K8S_BIN_DIR")
    if not bin_dir:
        bin_dir = subprocess.run(
            ["bash", os.path.join(SOURCE_DIR, "scripts", "build-k8s.sh"), "--bin-dir"],
            check=True, capture_output=True, text=True).stdout.strip()
    complete = os.path.join(os.path.dirname(bin_dir), ".complete")
    wanted = [os.path.join(bin_dir, name) for name in COMPONENTS + ("kubectl",)]
    missing = [path for path in [complete] + wanted if not os.path.exists(path)]
    if missing:
        raise MissingBinaries(
            "the real control plane is not built: missing " + ", ".join(missing) +
            " (scripts/build-k8s.sh builds it from Go modules)")
    return bin_dir


def exit_skipped_unless_built():
    """For a test program: exit 77 (ctest's SKIPPED), naming what is missing, when the
    control plane is not built."""
    try:
        return find_bin_dir()
    except MissingBinaries as e:
        print("SKIPPED: %s" % e)
        sys.exit(SKIP)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """preexec_fn: the child gets SIGKILL when the process that started it exits."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1."""

    def __init__(self, bin_dir=None, work_dir=None, log=sys.stderr, apiserver_args=()):
        self.apiserver_args = list(apiserver_args)
        self.bin_dir = find_bin_dir(bin_dir)
        self._own_dir = work_dir is None
        self.dir = work_dir or tempfile.mkdtemp(prefix="antdt-control-plane.")
        os.makedirs(self.dir, exist_ok=True)
        self.pki = os.path.join(self.dir, "pki")
        self.log = log
        self.procs = {}
        self.server = None
        self.kubeconfig = os.path.join(self.dir, "admin.kubeconfig")
        self.start_seconds = None
        self.version = None

    # -- certificates -----------------------------------------------------------------

    def _ca(self):
        os.makedirs(self.pki, exist_ok=True)
        key, crt = self._path("ca.key"), self._path("ca.crt")
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                 "-days", "2", "-subj", "/CN=antdt-test-ca")
        _openssl("genrsa", "-out", self._path("sa.key"), "2048")
        _openssl("rsa", "-in", self._path("sa.key"), "-pubout", "-out", self._path("sa.pub"))

    def _path(self, name):
        return os.path.join(self.pki, name)

    def _issue(self, name, subject, ext):
        """A key and certificate signed by the CA: pki/NAME.key, pki/NAME.crt."""
        key, csr, crt = self._path(name + ".key"), self._path(name + ".csr"), self._path(name + ".crt")
        extfile = self._path(name + ".ext")
        with open(extfile, "w") as f:
            f.write(ext)
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", subject)
        _openssl("x509", "-req", "-in", csr, "-CA", self._path("ca.crt"), "-CAkey", self._path("ca.key"),
                 "-CAcreateserial", "-out", crt, "-days", "2", "-extfile", extfile)
        return key, crt

    def _client_cert(self, name, user, groups=()):
        subject = "".join("/O=" + g for g in groups) + "/CN=" + user
        return self._issue(name, subject, "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n")

    def _write_kubeconfig(self, path, user, key, crt, namespace="default"):
        with open(path, "w") as f:
            json.dump({
                "apiVersion": "v1", "kind": "Config",
                "clusters": [{"name": "antdt-test",
                              "cluster": {"server": self.server,
                                          "certificate-authority": self._path("ca.crt")}}],
                "users": [{"name": user, "user": {"client-certificate": crt, "client-key": key}}],
                "contexts": [{"name": "antdt-test",
                              "context": {"cluster": "antdt-test", "user": user, "namespace": namespace}}],
                "current-context": "antdt-test",
            }, f, indent=1)
        return path

    def user_kubeconfig(self, user, groups=(), name=None):
        """A kubeconfig for USER in GROUPS, authenticated by a client certificate."""
        name = name or ("user-" + user.replace(":", "-"))
        key, crt = self._client_cert(name, user, groups)
        return self._write_kubeconfig(os.path.join(self.dir, name + ".kubeconfig"), user, key, crt)

    def node_kubeconfig(self, node, ip=None):
        """Node credentials, as a kubelet has (system:node:NODE in system:nodes: the Node
        authorizer and NodeRestriction apply): DIR/node-NODE.kubeconfig. With the node's IP,
        also a serving certificate for it, DIR/node-NODE-serving.crt and .key, with which
        the node serves `kubectl logs` to the API server."""
        path = self.user_kubeconfig("system:node:" + node, ["system:nodes"], name="node-" + node)
        if ip:
            name = "node-%s-serving" % node
            key, crt = self._issue(name, "/O=system:nodes/CN=system:node:" + node,
                                   "subjectAltName=IP:%s,DNS:%s\nextendedKeyUsage=serverAuth\n"
                                   "keyUsage=digitalSignature,keyEncipherment\n" % (ip, node))
            for src in (key, crt):
                shutil.copy(src, os.path.join(self.dir, os.path.basename(src)))
        return path

    # -- processes --------------------------------------------------------------------

    def _spawn(self, name, args):
        logf = open(os.path.join(self.dir, name + ".log"), "wb")
        self.procs[name] = subprocess.Popen(
            [os.path.join(self.bin_dir, name), *args], stdout=logf, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent, cwd=self.dir)
        logf.close()

    def log_tail(self, name, lines=25):
        try:
            with open(os.path.join(self.dir, name + ".log"), "rb") as f:
                return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""

    def _check_alive(self):
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError("%s exited with %s during start-up; its log:\n%s"
                                   % (name, proc.returncode, self.log_tail(name)))

    def _wait(self, what, probe, timeout):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                if probe():
                    return
            except Exception as e:  # noqa: BLE001 - anything is "not yet"
                last = e
            time.sleep(0.1)
        raise RuntimeError("%s not ready after %d s (last: %s)" % (what, timeout, last))

    def _https(self, path, timeout=5):
        ctx = ssl.create_default_context(cafile=self._path("ca.crt"))
        ctx.load_cert_chain(self._path("admin.crt"), self._path("admin.key"))
        with urllib.request.urlopen(self.server + path, context=ctx, timeout=timeout) as r:
            return r.status, r.read().decode()

    def start(self, timeout=120, attempts=3):
        """Starts every component; again with fresh ports (up to ATTEMPTS times) when one
        lost its port to another process between free_port() and its bind."""
        started = time.monotonic()
        for attempt in range(attempts):
            try:
                self._start(timeout)
                break
            except RuntimeError as e:
                self.stop()
                if "address already in use" not in str(e) or attempt + 1 == attempts:
                    raise
                print("antdt-control-plane: a port was taken meanwhile; starting again", file=sys.stderr)
            except BaseException:
                self.stop()
                raise
        self.start_seconds = time.monotonic() - started
        return self

    def _start(self, timeout):
        self._ca()
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        self.server = "https://127.0.0.1:%d" % api_port
        self._issue("apiserver", "/CN=kube-apiserver",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,"
                    "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
                    "extendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
        admin_key, admin_crt = self._client_cert("admin", "antdt-admin", ["system:masters"])
        self._write_kubeconfig(self.kubeconfig, "antdt-admin", admin_key, admin_crt)
        kcm = self.user_kubeconfig("system:kube-controller-manager", name="kube-controller-manager")
        sched = self.user_kubeconfig("system:kube-scheduler", name="kube-scheduler")
        # The API server's own client identity towards kubelets (logs, exec).
        self._client_cert("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ["kubeadm:cluster-admins"])

        etcd_url = self.etcd_url = "http://127.0.0.1:%d" % etcd_port
        shutil.rmtree(os.path.join(self.dir, "etcd"), ignore_errors=True)  # from an earlier attempt
        peer_url = "http://127.0.0.1:%d" % peer_port
        self._spawn("etcd", [
            "--data-dir=" + os.path.join(self.dir, "etcd"), "--name=antdt-test",
            "--listen-client-urls=" + etcd_url, "--advertise-client-urls=" + etcd_url,
            "--listen-peer-urls=" + peer_url, "--initial-advertise-peer-urls=" + peer_url,
            "--initial-cluster=antdt-test=" + peer_url, "--unsafe-no-fsync=true",
            "--log-level=warn"])
        self._wait("etcd", lambda: b"true" in urllib.request.urlopen(etcd_url + "/health", timeout=2).read(),
                   timeout)
        p = self._path
        # Every request's user, verb, resource and answer, one JSON line each in
        # DIR/audit.log (audit_events()): what a least-privilege check measures.
        self.audit_log = os.path.join(self.dir, "audit.log")
        with open(os.path.join(self.dir, "audit-policy.yaml"), "w") as f:
            f.write("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
                    "rules:\n- level: Metadata\n")
        self._spawn("kube-apiserver", [
            "--audit-policy-file=" + os.path.join(self.dir, "audit-policy.yaml"),
            "--audit-log-path=" + self.audit_log, "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--etcd-servers=" + etcd_url, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            "--secure-port=%d" % api_port,
            "--tls-cert-file=" + p("apiserver.crt"), "--tls-private-key-file=" + p("apiserver.key"),
            "--cert-dir=" + os.path.join(self.dir, "apiserver-certs"),
            "--client-ca-file=" + p("ca.crt"),
            "--kubelet-client-certificate=" + p("apiserver-kubelet-client.crt"),
            "--kubelet-client-key=" + p("apiserver-kubelet-client.key"),
            "--kubelet-certificate-authority=" + p("ca.crt"),
            # Nodes by their InternalIP (a test node's name resolves nowhere).
            "--kubelet-preferred-address-types=InternalIP",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--service-account-issuer=" + self.server,
            "--service-account-key-file=" + p("sa.pub"),
            "--service-account-signing-key-file=" + p("sa.key"),
            "--authorization-mode=Node,RBAC",
            # PodNodeSelector: a namespace's scheduler.alpha.kubernetes.io/node-selector
            # annotation pins its pods to its nodes (tests sharing one plane apart).
            "--enable-admission-plugins=NodeRestriction,PodNodeSelector",
            # The endpoint reconciler refuses a loopback address; nothing here
            # reaches the API server through the kubernetes Service anyway.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=false", "--profiling=false", "--v=1", *self.apiserver_args])
        self._wait("kube-apiserver /readyz", lambda: self._https("/readyz") == (200, "ok"), timeout)
        self._spawn("kube-controller-manager", [
            "--kubeconfig=" + kcm, "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
            "--service-account-private-key-file=" + p("sa.key"), "--root-ca-file=" + p("ca.crt"),
            "--use-service-account-credentials=true", "--controllers=*",
            "--concurrent-gc-syncs=5", "--v=1"])
        self._spawn("kube-scheduler", [
            "--kubeconfig=" + sched, "--leader-elect=false", "--bind-address=127.0.0.1",
            "--secure-port=0", "--v=1"])
        # Ready for tests: the controllers run (the default service account exists).
        self._wait("the default service account (kube-controller-manager)",
                   lambda: self._https("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
                   timeout)
        self.version = json.loads(self._https("/version")[1])["gitVersion"]

    def compact_etcd(self):
        """Compacts etcd's history up to now (what the API server does every 5 minutes):
        a watch from an older resource version then gets 410 Expired, where the API
        server reads it from etcd (--watch-cache=false)."""
        def post(path, body):
            req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())
        revision = int(post("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        post("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def stop(self, grace=5):
        """Each component in turn, clients first and etcd last: SIGTERM, SIGKILL after GRACE s."""
        for name in ["kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"]:
            proc = self.procs.get(name)
            if not proc:
                continue
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = {}

    def failed(self):
        """The first component that exited, with its code; None while all run."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                return name, proc.returncode
        return None

    def info(self):
        return {"server": self.server, "kubeconfig": self.kubeconfig, "version": self.version,
                "start_seconds": round(self.start_seconds or 0, 2), "dir": self.dir,
                "bin_dir": self.bin_dir, "ca": self._path("ca.crt"),
                "pids": {name: proc.pid for name, proc in self.procs.items()}}

    @classmethod
    def attach(cls, work_dir):
        """The plane running in WORK_DIR (another process's `run`), to mint credentials for."""
        with open(os.path.join(work_dir, "admin.kubeconfig")) as f:
            server = json.load(f)["clusters"][0]["cluster"]["server"]
        plane = cls.__new__(cls)
        plane.dir, plane.pki, plane.server = work_dir, os.path.join(work_dir, "pki"), server
        return plane

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        if self._own_dir and not os.environ.get("ANTDT_KEEP_CONTROL_PLANE"):
            subprocess.run(["rm", "-rf", self.dir], check=False)


# -- the program ----------------------------------------------------------------------

def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _run(args):
    if args.watch_pid:
        # Detached by `start`: the plane outlives its starter and follows WATCH_PID.
        def watched():
            return _alive(args.watch_pid)
    else:
        _die_with_parent()
        parent = os.getppid()

        def watched():
            return os.getppid() == parent
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.append(True))
    plane = ControlPlane(args.bin_dir, args.dir)
    try:
        plane.start(timeout=args.timeout)
    except RuntimeError as e:
        print("antdt-control-plane: %s" % e, file=sys.stderr)
        return 1
    info = plane.info()
    print("antdt-control-plane: %s ready in %.1f s at %s (kubeconfig %s)"
          % (plane.version, plane.start_seconds, plane.server, plane.kubeconfig), file=sys.stderr)
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(info) + "\n")
        os.rename(tmp, args.ready_file)
    code = 0
    while not stop and watched():
        bad = plane.failed()
        if bad:
            print("antdt-control-plane: %s exited with %s; its log:\n%s"
                  % (bad[0], bad[1], plane.log_tail(bad[0])), file=sys.stderr)
            code = 1
            break
        time.sleep(0.2)
    plane.stop()
    return code


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start the control plane and keep it until SIGTERM")
    run.add_argument("--dir", required=True)
    run.add_argument("--ready-file")
    run.add_argument("--bin-dir")
    run.add_argument("--timeout", type=float, default=120)
    kc = sub.add_parser("kubeconfig", help="a kubeconfig for another user of a running plane")
    kc.add_argument("--dir", required=True)
    kc.add_argument("--user")
    kc.add_argument("--group", action="append", default=[])
    kc.add_argument("--out", help="where to write it (not with --node)")
    kc.add_argument("--node", help="node credentials for NODE into --dir (node-NODE.kubeconfig)")
    kc.add_argument("--serving-ip", help="with --node: also its serving certificate for this IP")
    run.add_argument("--watch-pid", type=int, help="stop once this process is gone (not the parent)")
    start = sub.add_parser("start", help="start a shared plane in the background; return once ready")
    start.add_argument("--dir", required=True)
    start.add_argument("--bin-dir")
    start.add_argument("--watch-pid", type=int, help="the plane stops once this process is gone "
                       "(default: this command's parent)")
    start.add_argument("--timeout", type=float, default=120)
    stop_cmd = sub.add_parser("stop", help="stop the plane `start` left running in --dir")
    stop_cmd.add_argument("--dir", required=True)
    sub.add_parser("bin-dir", help="print where the binaries are; exit 77 if not built")
    args = parser.parse_args(argv)
    try:
        if args.command == "bin-dir":
            print(find_bin_dir())
            return 0
        if args.command == "run":
            return _run(args)
        if args.command == "start":
            return _start_shared(args)
        if args.command == "stop":
            return _stop_shared(args.dir)
        return _kubeconfig(args)
    except MissingBinaries as e:
        print("SKIPPED: %s" % e, file=sys.stderr)
        return SKIP


def _start_shared(args):
    """`start`: `run` detached in DIR (a fresh DIR: a plane left there is stopped first)."""
    bin_dir = find_bin_dir(args.bin_dir)
    _stop_shared(args.dir)
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    ready = os.path.join(args.dir, "ready.json")
    with open(os.path.join(args.dir, "run.log"), "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "run", "--dir", args.dir, "--bin-dir", bin_dir,
             "--ready-file", ready, "--timeout", str(args.timeout),
             "--watch-pid", str(args.watch_pid or os.getppid())],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    with open(os.path.join(args.dir, "run.pid"), "w") as f:
        f.write("%d\n" % proc.pid)
    deadline = time.monotonic() + args.timeout * 3 + 30  # `run` itself tries up to three times
    while not os.path.exists(ready):
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                _stop_shared(args.dir)
            with open(os.path.join(args.dir, "run.log"), errors="replace") as f:
                print("antdt-control-plane: the shared plane did not start:\n" + f.read()[-4000:],
                      file=sys.stderr)
            return 1
        time.sleep(0.1)
    with open(ready) as f:
        print(f.read().strip())
    return 0


def _stop_shared(work_dir, grace=30):
    """`stop`: SIGTERM to the plane `start` left in WORK_DIR (its components stop with it)."""
    try:
        with open(os.path.join(work_dir, "run.pid")) as f:
            pid = int(f.read().strip())
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmdline = f.read().split(b"\0")
    except (OSError, ValueError):
        return 0
    # Only the plane this file started there (a pid file outlives its process; pids are reused).
    if not any(a.endswith(b"antdt_control_plane.py") for a in cmdline) or work_dir.encode() not in cmdline:
        return 0
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return 0
    deadline = time.monotonic() + grace
    while _alive(pid) and time.monotonic() < deadline:
        try:  # our own child when `start` is still waiting; otherwise init reaps it
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    os.remove(os.path.join(work_dir, "run.pid"))
    return 0


def _kubeconfig(args):
    plane = ControlPlane.attach(args.dir)
    if args.node:
        print(plane.node_kubeconfig(args.node, args.serving_ip))
        return 0
    if not args.user or not args.out:
        print("antdt-control-plane: kubeconfig needs --node, or --user and --out", file=sys.stderr)
        return 2
    key, crt = plane._client_cert("user-" + args.user.replace(":", "-"), args.user, args.group)
    plane._write_kubeconfig(args.out, args.user, key, crt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
