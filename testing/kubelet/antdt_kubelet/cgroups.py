"""A real CPU quota per node (--cpu-quota-cgroups): what a kubelet's CPU limit does to a pod.

Each node gets a cgroup of the cpu controller, antdt-kubelet-PID-NODE, under the cgroup v1 cpu hierarchy
(/sys/fs/cgroup/cpu, a hybrid host such as the project's machines) or else the unified v2 one when it offers cpu
(as the local runner's groups, backends/local/cgroup.h). Every container the kubelet starts on the node joins its
group between fork and exec, and the node's agent samples the group (--cgroup-root, --cgroups), so throttling is
measured and the Monitor can name the cause. The quota follows the file <quota dir>/<node>.cpu-quota: a factor F
caps the node's containers to 1/F of one core over a 50 ms period; 1, no file or an unreadable one: no cap.

Where no group can be made (not root, no cpu controller, a bare chroot), `create` raises OSError naming the path,
and the kubelet emulates the quota through the node's speed file instead (its cause then reads unknown)."""

import os

from .api import log

V1_ROOT = "/sys/fs/cgroup/cpu"
V2_ROOT = "/sys/fs/cgroup"
# 50 ms, half the kernel's (and Kubernetes') 100 ms: a step of tens of milliseconds still runs near a steady share,
# and the least quota (1 ms) is a fiftieth of a core, so a node can be capped below what a worker that computes a
# tenth of its step asks for (a host feeding an accelerator) and slowed several times over: 1/40 of a core against
# a tenth is 4x.
PERIOD_US = 50000


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def cpu_root():
    """(root, version): the v1 cpu controller when mounted, else the unified hierarchy when it lists cpu."""
    if os.path.exists(os.path.join(V1_ROOT, "cpu.cfs_quota_us")):
        return V1_ROOT, 1
    try:
        with open(os.path.join(V2_ROOT, "cgroup.controllers")) as f:
            if "cpu" in f.read().split():
                return V2_ROOT, 2
    except OSError:
        pass
    raise OSError("no cgroup cpu controller: neither %s/cpu.cfs_quota_us nor cpu in %s/cgroup.controllers"
                  % (V1_ROOT, V2_ROOT))


def read_factor(path):
    """The factor in `path` (> 1: a cap), or 1 when there is none or it is not a number above 0."""
    try:
        with open(path) as f:
            factor = float(f.read().strip())
    except (OSError, ValueError):
        return 1.0
    return factor if factor > 0 else 1.0


def quota_text(version, factor):
    """cpu.cfs_quota_us (v1) or cpu.max (v2) for a 1/factor share of one core; no limit at factor <= 1."""
    if factor <= 1:
        return "-1" if version == 1 else "max %d" % PERIOD_US
    quota = max(1000, int(PERIOD_US / factor))  # the kernel's least quota is 1 ms
    return str(quota) if version == 1 else "%d %d" % (quota, PERIOD_US)


def remove_stale(root):
    """Removes the empty groups of kubelets no longer running (SIGKILLed: no cleanup of their own)."""
    for name in os.listdir(root):
        parts = name.split("-")
        if len(parts) < 4 or parts[:2] != ["antdt", "kubelet"] or not parts[2].isdigit():
            continue
        if os.path.exists("/proc/%s" % parts[2]):
            continue
        try:
            os.rmdir(os.path.join(root, name))
            log("cgroup_stale_removed", cgroup=os.path.join(root, name))
        except OSError:
            pass  # not empty (a process still in it), or gone meanwhile


class CpuCgroups:
    """One cgroup per node, made at once; OSError (the path named) when one cannot be."""

    def __init__(self, node_names, quota_dir):
        self.root, self.version = cpu_root()
        self.quota_dir = quota_dir
        self.paths = {}
        self.factors = {}
        remove_stale(self.root)
        try:
            for name in node_names:
                group = "antdt-kubelet-%d-%s" % (os.getpid(), name)
                path = os.path.join(self.root, group)
                os.mkdir(path)
                self.paths[name] = path
                if self.version == 1:
                    _write(os.path.join(path, "cpu.cfs_period_us"), str(PERIOD_US))
                self._set(name, 1.0)
        except OSError:
            self.remove_all()
            raise

    def name(self, node):
        """The node's group relative to root, as the agent's --cgroups takes it."""
        return os.path.basename(self.paths[node])

    def procs_file(self, node):
        return os.path.join(self.paths[node], "cgroup.procs")

    def _set(self, node, factor):
        quota_file = "cpu.cfs_quota_us" if self.version == 1 else "cpu.max"
        _write(os.path.join(self.paths[node], quota_file), quota_text(self.version, factor))
        self.factors[node] = factor

    def sync(self):
        """Applies each node's <node>.cpu-quota when it changed."""
        for node in self.paths:
            factor = read_factor(os.path.join(self.quota_dir, node + ".cpu-quota"))
            if factor == self.factors.get(node):
                continue
            try:
                self._set(node, factor)
                log("cpu_quota", node=node, factor=factor, cgroup=self.paths[node])
            except OSError as e:
                log("cpu_quota_failed", node=node, factor=factor, error=str(e))

    def remove_all(self):
        """Moves what is left in each group to the root group and removes the group."""
        for node, path in list(self.paths.items()):
            try:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    pids = f.read().split()
                for pid in pids:
                    try:
                        _write(os.path.join(self.root, "cgroup.procs"), pid)
                    except OSError:
                        pass  # exited meanwhile
                os.rmdir(path)
            except OSError as e:
                log("cgroup_remove_failed", node=node, cgroup=path, error=str(e))
            del self.paths[node]


class EmulatedQuotas:
    """No cgroup: the quota as the node's speed file (1/factor), as the local runner emulates one."""

    def __init__(self, node_names, quota_dir, speed_dir):
        self.nodes = list(node_names)
        self.quota_dir = quota_dir
        self.speed_dir = speed_dir
        self.factors = {}

    def sync(self):
        for node in self.nodes:
            factor = read_factor(os.path.join(self.quota_dir, node + ".cpu-quota"))
            if factor == self.factors.get(node, 1.0):
                continue
            self.factors[node] = factor
            speed = os.path.join(self.speed_dir, node + ".speed")
            _write(speed + ".tmp", "%g\n" % (1.0 / max(factor, 1.0)))
            os.replace(speed + ".tmp", speed)
            log("cpu_quota_emulated", node=node, factor=factor, speed_file=speed)
