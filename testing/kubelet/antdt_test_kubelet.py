#!/usr/bin/python3
"""antdt-test-kubelet: a kubelet and trivial scheduler for AntDT's Kubernetes end-to-end tests.

Registers Nodes in an API server (the emulator, or any), binds unscheduled pods to them, and runs
the pods bound to them as local processes from --bin-dir (or the image's Python). See README.md."""

import argparse
import os
import signal
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from antdt_kubelet import cgroups as cgroups_lib  # noqa: E402
from antdt_kubelet import nodes as nodes_lib  # noqa: E402
from antdt_kubelet.api import Api, Informer, describe, log  # noqa: E402
from antdt_kubelet.kubelet import Kubelet  # noqa: E402
from antdt_kubelet.logs import LogServer  # noqa: E402
from antdt_kubelet.volumes import Provisioner  # noqa: E402
from antdt_kubelet.scheduler import Scheduler  # noqa: E402

_NODE_CHECK_S = 10


def make_quotas(args, nodes):
    """(the nodes' cgroups or None, what applies the quota files): real cgroups where they can be made, else
    the speed file; written to <speed-dir>/cpu-quota.status ("cgroup ROOT" or "emulated: WHY")."""
    names = [n["name"] for n in nodes]
    try:
        cgroups = cgroups_lib.CpuCgroups(names, args.speed_dir)
        status = "cgroup %s v%d" % (cgroups.root, cgroups.version)
        quotas = cgroups
    except OSError as e:
        cgroups = None
        status = "emulated: %s" % describe(e)
        quotas = cgroups_lib.EmulatedQuotas(names, args.speed_dir, args.speed_dir)
    log("cpu_quota_cgroups", status=status)
    path = os.path.join(args.speed_dir, "cpu-quota.status")
    with open(path + ".tmp", "w") as f:
        f.write(status + "\n")
    os.replace(path + ".tmp", path)
    return cgroups, quotas


def parse_args(argv):
    p = argparse.ArgumentParser(prog="antdt_test_kubelet.py", description=__doc__)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--server", help="API server URL, e.g. http://127.0.0.1:6443")
    target.add_argument("--kubeconfig", help="kubeconfig file")
    p.add_argument("--nodes", required=True, help="YAML list of {name, labels, hostIP}")
    p.add_argument("--bin-dir", required=True, help="AntDT binaries (build/bin); the antdt Python SDK in ../python")
    p.add_argument("--image-root", help="what the image holds at /opt/antdt (the repository: examples/...)")
    p.add_argument("--work-dir", required=True, help="pod sandboxes and logs")
    p.add_argument("--ip-base", default="127.1.0", help="pod IPs 127.X.Y.10.., node IPs 127.X.(Y+1).1..")
    p.add_argument("--agent-monitor", help="HOST:PORT: run antdt-agent per node, streaming there")
    p.add_argument("--agent-tls-dir", help="the agents' certificates (scripts/make-certs.sh DIR NODE...): "
                   "each agent serves and streams with node-NAME.crt, trusting ca.crt")
    p.add_argument("--speed-dir", help="containers get ANTDT_NODE_SPEED_FILE=<dir>/<node>.speed")
    p.add_argument("--cpu-quota-cgroups", action="store_true",
                   help="a cgroup of the cpu controller per node, holding its containers and sampled by its agent, "
                        "capped to 1/F of a core while <speed-dir>/<node>.cpu-quota says F (root); without a cgroup "
                        "the quota is emulated through the speed file. <speed-dir>/cpu-quota.status says which")
    p.add_argument("--ready-file", help="written with 'ok' once nodes are registered and watches run")
    p.add_argument("--user-agent", default="antdt-test-kubelet")
    p.add_argument("--namespace", help="watch one namespace (default: all)")
    p.add_argument("--node-credentials", metavar="DIR",
                   help="DIR/node-NAME.kubeconfig per node: act for each node as system:node:NAME, as a "
                        "kubelet does (the Node authorizer and NodeRestriction apply); pods are watched per node. "
                        "With DIR/node-NAME-serving.crt and .key (for the node's IP), serve `kubectl logs` on the "
                        "node's IP to clients with a certificate of the kubeconfig's CA")
    p.add_argument("--scheduler", choices=("builtin", "none"), default="builtin",
                   help="none: leave binding to a real kube-scheduler")
    p.add_argument("--provision-volumes", action="store_true",
                   help="give each pending PersistentVolumeClaim a volume pre-bound to it (a local-path "
                        "provisioner), with the --kubeconfig/--server credentials")
    p.add_argument("--node-leases", action="store_true",
                   help="renew each node's Lease in kube-node-lease every 10 s (a real node-lifecycle "
                        "controller marks nodes without it NotReady)")
    args = p.parse_args(argv)
    if args.cpu_quota_cgroups and not args.speed_dir:
        p.error("--cpu-quota-cgroups: needs --speed-dir (the <node>.cpu-quota files)")
    args.bin_dir = os.path.abspath(args.bin_dir)
    args.work_dir = os.path.abspath(args.work_dir)
    if args.image_root:
        args.image_root = os.path.abspath(args.image_root)
        if not os.path.isdir(args.image_root):
            p.error("--image-root: %s is not a directory" % args.image_root)
    parts = args.ip_base.split(".")
    if len(parts) != 3 or parts[0] != "127" or not all(x.isdigit() and int(x) < 255 for x in parts[1:]) \
            or int(parts[2]) >= 254:
        p.error("--ip-base: must look like 127.X.Y with X < 255 and Y < 254")
    return args


def main(argv):
    args = parse_args(argv)
    stop = threading.Event()
    wake = threading.Event()

    def on_signal(signum, _frame):
        log("signal", signal=signal.Signals(signum).name)
        stop.set()
        wake.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    os.makedirs(args.work_dir, exist_ok=True)
    api = Api(server=args.server, kubeconfig=args.kubeconfig, user_agent=args.user_agent)
    nodes = nodes_lib.load_nodes(args.nodes, args.ip_base)
    node_apis = {n["name"]: api for n in nodes}
    log_servers = []
    kubelet = None
    if args.node_credentials:
        node_apis = {n["name"]: Api(kubeconfig=os.path.join(args.node_credentials, "node-%s.kubeconfig" % n["name"]),
                                    user_agent=args.user_agent) for n in nodes}
        for node in nodes:
            serving = os.path.join(args.node_credentials, "node-%s-serving" % node["name"])
            if os.path.exists(serving + ".crt"):
                server = LogServer(node, serving + ".crt", serving + ".key", node_apis[node["name"]].ca_file,
                                   lambda ns, pod: kubelet.log_of(ns, pod) if kubelet else None).start()
                node["kubeletPort"] = server.port
                log_servers.append(server)
    while not stop.is_set():
        try:
            for node in nodes:
                nodes_lib.ensure_node(node_apis[node["name"]], node)
            break
        except Exception as e:  # noqa: BLE001 - the API server may still be starting
            log("node_register_failed", error=describe(e))
            stop.wait(1)

    prefix = "/api/v1/namespaces/%s/" % args.namespace if args.namespace else "/api/v1/"
    if args.node_credentials:
        # A node may list and watch only the pods bound to it.
        pods = [Informer(node_apis[n["name"]], prefix + "pods", wake.set, "pods-" + n["name"],
                         query={"fieldSelector": "spec.nodeName=" + n["name"]}) for n in nodes]
        services = Informer(node_apis[nodes[0]["name"]], prefix + "services", wake.set, "services")
    else:
        pods = [Informer(api, prefix + "pods", wake.set, "pods")]
        services = Informer(api, prefix + "services", wake.set, "services")
    claims = None
    if args.provision_volumes:
        claims = Informer(api, prefix + "persistentvolumeclaims", wake.set, "claims")
    informers = pods + [services] + ([claims] if claims else [])
    for informer in informers:
        informer.start()
    while not stop.is_set() and not all(i.synced.is_set() for i in informers):
        stop.wait(0.1)
    if args.node_leases:
        nodes_lib.renew_leases(node_apis, nodes)

    cgroups, quotas = make_quotas(args, nodes) if args.cpu_quota_cgroups else (None, None)
    agents = nodes_lib.Agents(nodes, args.bin_dir, args.work_dir, args.agent_monitor,
                              tls_dir=args.agent_tls_dir, cgroups=cgroups) if args.agent_monitor else None
    scheduler = Scheduler(api, nodes) if args.scheduler == "builtin" else None
    provisioner = Provisioner(api, args.work_dir) if claims else None
    kubelet = Kubelet(api, nodes, args.bin_dir, args.work_dir, args.ip_base, args.speed_dir,
                      image_root=args.image_root, node_apis=node_apis if args.node_credentials else None,
                      cgroups=cgroups)
    if args.ready_file and not stop.is_set():
        with open(args.ready_file + ".tmp", "w") as f:
            f.write("ok\n")
        os.replace(args.ready_file + ".tmp", args.ready_file)
        log("ready", nodes=",".join(n["name"] for n in nodes), server=api.host)

    next_node_check = time.monotonic() + _NODE_CHECK_S
    while not stop.is_set():
        wake.wait(0.2)
        wake.clear()
        if stop.is_set():
            break
        pod_list = [p for informer in pods for p in informer.items()]
        if scheduler:
            scheduler.sync(pod_list)
        if provisioner:
            provisioner.sync(claims.items())
        if quotas:
            quotas.sync()
        kubelet.sync(pod_list, services.items())
        if agents:
            agents.sync()
        if time.monotonic() >= next_node_check:
            nodes_lib.keep_nodes_ready(node_apis, nodes)
            if args.node_leases:
                nodes_lib.renew_leases(node_apis, nodes)
            next_node_check = time.monotonic() + _NODE_CHECK_S

    for informer in informers:
        informer.stop()
    for server in log_servers:
        server.stop()
    kubelet.shutdown()
    if agents:
        agents.shutdown()
    if cgroups:
        cgroups.remove_all()
    log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
