"""Node objects (registered and kept Ready) and the per-node antdt-agent a DaemonSet would run."""

import os
import time

import yaml

from . import process
from .api import describe, is_status, log


def load_nodes(path, ip_base):
    """The --nodes YAML: a list of {name, labels, hostIP}; host IPs default to 127.X.(Y+1).1, .2, ..."""
    with open(path) as f:
        entries = yaml.safe_load(f) or []
    a, b, c = ip_base.split(".")
    nodes = []
    for i, entry in enumerate(entries):
        labels = {str(k): str(v) for k, v in (entry.get("labels") or {}).items()}
        nodes.append({"name": entry["name"], "labels": labels, "file_labels": dict(labels),
                      "hostIP": entry.get("hostIP") or "%s.%s.%d.%d" % (a, b, int(c) + 1, i + 1)})
        labels.setdefault("kubernetes.io/hostname", entry["name"])
    return nodes


def _node_status(node):
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    capacity = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    return {
        "capacity": capacity,
        "allocatable": capacity,
        "addresses": [{"type": "InternalIP", "address": node["hostIP"]},
                      {"type": "Hostname", "address": node["name"]}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "antdt test kubelet is posting ready status",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "nodeInfo": {"kubeletVersion": "v1.30.0-antdt-test", "operatingSystem": "linux", "architecture": "amd64",
                     "containerRuntimeVersion": "antdt-test://1", "kernelVersion": "", "osImage": "",
                     "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
        # Where the API server finds this node's log endpoint (`kubectl logs`), when it serves one.
        "daemonEndpoints": {"kubeletEndpoint": {"Port": node.get("kubeletPort", 0)}},
    }


def _ready(obj):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def ensure_node(api, node):
    """Creates the Node (or adds our labels to an existing one) and makes its status Ready."""
    path = "/api/v1/nodes/" + node["name"]
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node["name"], "labels": node["labels"]},
            "spec": {}, "status": _node_status(node)}
    try:
        obj = api.request("POST", "/api/v1/nodes", body)
        log("node_registered", node=node["name"], hostIP=node["hostIP"])
    except Exception as e:  # noqa: BLE001
        if not is_status(e, 409):
            raise

        def add_labels(existing):
            labels = dict(existing["metadata"].get("labels") or {})
            if all(labels.get(k) == v for k, v in node["labels"].items()):
                return None
            labels.update(node["labels"])
            existing["metadata"]["labels"] = labels
            return existing

        obj = api.update_with_retry(path, add_labels)
    if _ready(obj) and (obj.get("status") or {}).get("addresses"):
        return

    def set_status(existing):
        existing["status"] = dict(existing.get("status") or {}, **_node_status(node))
        return existing

    try:
        api.update_with_retry(path + "/status", set_status)
    except Exception as e:  # noqa: BLE001 - a server without nodes/status takes it on the object
        if not (is_status(e, 404) or is_status(e, 405)):
            raise
        api.update_with_retry(path, set_status)
    log("node_ready", node=node["name"])


def keep_nodes_ready(apis, nodes):
    """apis: node name -> the client to check and register that node with."""
    for node in nodes:
        api = apis[node["name"]]
        try:
            obj = api.get("/api/v1/nodes/" + node["name"])
            if _ready(obj):
                continue
        except Exception as e:  # noqa: BLE001
            if not is_status(e, 404):
                log("node_check_failed", node=node["name"], error=describe(e))
                continue
        try:
            ensure_node(api, node)
        except Exception as e:  # noqa: BLE001
            log("node_register_failed", node=node["name"], error=describe(e))


def renew_lease(api, node):
    """The node's Lease in kube-node-lease (its heartbeat for the node-lifecycle controller):
    created on the first call, its renewTime moved to now on every later one."""
    name = node["name"]
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + name
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    spec = {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now}
    try:
        def renew(lease):
            lease["spec"] = dict(lease.get("spec") or {}, **spec)
            return lease

        api.update_with_retry(path, renew)
    except Exception as e:  # noqa: BLE001
        if not is_status(e, 404):
            raise
        api.request("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                    {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": name, "namespace": "kube-node-lease"}, "spec": spec})
        log("node_lease_created", node=name)


def renew_leases(apis, nodes):
    for node in nodes:
        try:
            renew_lease(apis[node["name"]], node)
        except Exception as e:  # noqa: BLE001 - tried again on the next beat
            log("node_lease_failed", node=node["name"], error=describe(e))


class Agents:
    """One `antdt-agent` per node, restarted a second after it dies."""

    def __init__(self, nodes, bin_dir, work_dir, monitor, monotonic=time.monotonic, tls_dir=None, cgroups=None):
        self.nodes = nodes
        self.cgroups = cgroups  # cgroups.CpuCgroups: each agent samples its node's group
        self.tls_dir = tls_dir  # node-NAME.crt/.key and ca.crt (scripts/make-certs.sh): mutual TLS
        self.binary = os.path.join(bin_dir, "antdt-agent")
        self.dir = os.path.join(work_dir, "agents")
        self.monitor = monitor
        self.monotonic = monotonic
        self.procs = {}
        self.next_start = {}
        os.makedirs(self.dir, exist_ok=True)

    def argv(self, node):
        argv = [self.binary, "--node", node["name"], "--listen", node["hostIP"] + ":9400",
                "--monitor", self.monitor, "--interval", "1s"]
        if self.tls_dir:
            name = node["name"]
            argv += ["--tls-cert", os.path.join(self.tls_dir, "node-%s.crt" % name),
                     "--tls-key", os.path.join(self.tls_dir, "node-%s.key" % name),
                     "--tls-ca", os.path.join(self.tls_dir, "ca.crt"), "--tls-server-name", "antdt.internal"]
        if self.cgroups:
            argv += ["--cgroup-root", self.cgroups.root, "--cgroups", self.cgroups.name(node["name"])]
        if node["file_labels"]:
            argv += ["--labels", ",".join("%s=%s" % kv for kv in sorted(node["file_labels"].items()))]
        return argv

    def sync(self):
        for node in self.nodes:
            name = node["name"]
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                process.signal_group(proc, 9)
                log("agent_exited", node=name, exit_code=process.exit_code(proc))
                self.procs[name] = proc = None
                self.next_start[name] = self.monotonic() + 1.0
            if proc is None and self.monotonic() >= self.next_start.get(name, 0):
                argv = self.argv(node)
                try:
                    self.procs[name] = process.spawn(argv, self.dir, dict(os.environ),
                                                     os.path.join(self.dir, name + ".log"))
                except OSError as e:
                    log("agent_start_failed", node=name, error=describe(e))
                    self.next_start[name] = self.monotonic() + 5.0
                    continue
                log("agent_started", node=name, pid=self.procs[name].pid, argv=" ".join(argv))

    def shutdown(self):
        process.stop_all(list(self.procs.values()), grace_s=3)
