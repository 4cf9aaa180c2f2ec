"""The kubelet: runs the pods bound to its nodes as local processes and reports their status.

Level-triggered: `sync()` compares every pod of its nodes (from the informer cache) with the local
processes and acts; it never blocks on a process (grace periods and restart backoff are deadlines
checked on later passes)."""

import base64
import json
import os
import signal
import time

from . import process
from . import spec as podspec
from .api import describe, is_status, log

_PASSTHROUGH_ENV = ("LD_LIBRARY_PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS")
_MAX_GRACE_S = 10
_DNS_RETRY_S = 0.5


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class IpPool:
    """Pod IPs 127.X.Y.10-254, handed out round-robin and skipping those in use.

    A pod created again under the same namespace/name gets its previous IP when it is free: a
    container's service and host names are resolved once, when it starts (a process's environment
    cannot re-resolve), so this stands in for the DNS re-resolution by which a real client finds a
    re-created pod (a sharding service or worker-0 after an eviction)."""

    def __init__(self, base):
        self.base = base
        self.in_use = set()
        self.cursor = 0
        self.previous = {}  # namespace/name -> the IP its last pod had

    def allocate(self, key=None):
        remembered = self.previous.get(key)
        if remembered is not None and remembered not in self.in_use:
            self.in_use.add(remembered)
            return remembered
        taken = set(self.previous.values())
        for avoid in (True, False):  # another name's remembered IP only when nothing else is free
            for _ in range(245):
                ip = "%s.%d" % (self.base, 10 + self.cursor)
                self.cursor = (self.cursor + 1) % 245
                if ip not in self.in_use and not (avoid and ip in taken):
                    self.in_use.add(ip)
                    if key is not None:
                        self.previous[key] = ip
                    return ip
        raise RuntimeError("no free pod IP in %s.10-254" % self.base)

    def release(self, ip):
        self.in_use.discard(ip)


class PodState:
    """What this kubelet knows of one pod (by UID) beyond the API object."""

    def __init__(self, pod, node, ip, sandbox):
        self.key = "%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"])
        self.uid = pod["metadata"]["uid"]
        self.node = node
        self.ip = ip
        self.sandbox = sandbox
        self.start_time = now_rfc3339()
        self.proc = None
        self.started_at = None
        self.started_mono = 0.0
        self.ever_started = False
        self.restart_count = 0
        self.next_start = 0.0
        self.backoff_s = 1.0
        self.waiting = ("ContainerCreating", "")
        self.last_terminated = None
        self.terminated = None  # final state, with phase Succeeded/Failed
        self.kill_deadline = None
        self.sigkilled = False
        self.deleted = False
        self.written = None  # the last status written
        self.status_retry_at = 0.0
        self.conditions = {}  # type -> (status, lastTransitionTime)


class Kubelet:
    def __init__(self, api, nodes, bin_dir, work_dir, ip_base, speed_dir=None, monotonic=time.monotonic,
                 image_root=None, node_apis=None, cgroups=None):
        self.api = api
        self.cgroups = cgroups  # cgroups.CpuCgroups: each container in its node's group
        # Per node, the client with that node's own credentials (system:node:NAME), for
        # everything about the pods bound to it, as a real kubelet; else `api`.
        self.node_apis = node_apis or {}
        self.nodes = {n["name"]: n for n in nodes}
        self.bin_dir = bin_dir
        self.image_root = image_root  # stands for the image's /opt/antdt
        self.work_dir = work_dir
        self.speed_dir = speed_dir
        self.ips = IpPool(ip_base)
        self.monotonic = monotonic
        self.pods = {}  # uid -> PodState
        self.deleting = set()  # uids of finished, unadmitted pods whose DELETE was sent
        host = api.host.split("://", 1)[-1].rstrip("/")
        self.api_host, _, self.api_port = host.rpartition(":")

    def _api(self, node):
        return self.node_apis.get(node, self.api)

    def log_of(self, namespace, name):
        """(the log file, whether its container runs) of the pod's current sandbox, or None.
        Called from the log servers' threads: reads a copy of the table."""
        key = "%s/%s" % (namespace, name)
        states = [s for s in list(self.pods.values()) if s.key == key]
        if not states:
            return None
        state = max(states, key=lambda s: s.start_time)
        return os.path.join(state.sandbox, "log"), state.proc is not None

    # -- the loop -------------------------------------------------------------------------------

    def sync(self, pods, services):
        mine = {p["metadata"]["uid"]: p for p in pods if p.get("spec", {}).get("nodeName") in self.nodes}
        for uid in [u for u in self.pods if u not in mine]:
            self._forget(self.pods.pop(uid))
        self.deleting &= set(mine)
        for uid, pod in mine.items():
            try:
                self._sync_pod(pod, pods, services)
            except Exception as e:  # noqa: BLE001 - one broken pod must not stop the others
                log("pod_sync_error", pod=_key(pod), error=describe(e))

    def shutdown(self):
        process.stop_all([s.proc for s in self.pods.values()], grace_s=3)

    def _sync_pod(self, pod, pods, services):
        state = self.pods.get(pod["metadata"]["uid"])
        if state is None:
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                # Finished before this kubelet started: nothing to run, but deletion is still ours.
                if pod["metadata"].get("deletionTimestamp") and pod["metadata"]["uid"] not in self.deleting:
                    self.deleting.add(pod["metadata"]["uid"])
                    self._delete(_key(pod), pod["metadata"]["uid"], pod["spec"].get("nodeName"))
                return
            state = self._admit(pod)
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(state, pod)
            return
        if state.proc is not None and state.proc.poll() is not None:
            self._on_exit(state, pod)
        if state.proc is None and state.terminated is None and self.monotonic() >= state.next_start:
            self._try_start(state, pod, pods, services)
        self._write_status(state, pod)

    def _admit(self, pod):
        meta = pod["metadata"]
        sandbox = os.path.join(self.work_dir, "pods", "%s_%s_%s" % (meta["namespace"], meta["name"], meta["uid"]))
        os.makedirs(sandbox, exist_ok=True)
        node = pod["spec"]["nodeName"]
        # A host-network pod's IP is its node's.
        key = "%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"])
        ip = self.nodes[node]["hostIP"] if pod["spec"].get("hostNetwork") else self.ips.allocate(key)
        state = PodState(pod, node, ip, sandbox)
        state.host_network = bool(pod["spec"].get("hostNetwork"))
        self.pods[state.uid] = state
        log("pod_admitted", pod=state.key, node=state.node, ip=state.ip, sandbox=sandbox)
        return state

    # -- starting ---------------------------------------------------------------------------------

    def _base_env(self, pod, state):
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOSTNAME": podspec.pod_hostname(pod)}
        env.update({k: os.environ[k] for k in _PASSTHROUGH_ENV if k in os.environ})
        if self.api_port:
            env["KUBERNETES_SERVICE_HOST"] = self.api_host
            env["KUBERNETES_SERVICE_PORT"] = self.api_port
        if self.speed_dir:
            env["ANTDT_NODE_SPEED_FILE"] = os.path.join(self.speed_dir, state.node + ".speed")
        return env

    def _try_start(self, state, pod, pods, services):
        container = pod["spec"]["containers"][0]
        view = dict(pod)  # the pod as it will be once this kubelet's status lands
        view["status"] = dict(pod.get("status") or {}, podIP=state.ip, podIPs=[{"ip": state.ip}],
                              hostIP=self._host_ip(state), hostIPs=[{"ip": self._host_ip(state)}])
        try:
            binary = podspec.resolve_binary(container, self.bin_dir)
            base = self._base_env(view, state)
            if binary == podspec.SYSTEM_PYTHON:
                base.update(podspec.python_base_env(self.bin_dir))
            env = podspec.container_env(view, container, base,
                                        lambda name, key, optional: self._secret_key(pod, name, key, optional))
            if binary == podspec.SYSTEM_PYTHON:
                env = podspec.keep_sdk_importable(env, self.bin_dir)
            argv = podspec.map_image_paths(podspec.container_argv(container, env), self.image_root)
            mounts = podspec.host_path_mounts(pod, container, state.sandbox,
                                              lambda name, optional: self._secret_data(pod, name, optional),
                                              lambda name: self._claim_dir(pod, name))
            argv = podspec.map_host_paths(podspec.bind_to_pod_ip(argv, state.ip), mounts)
            # A variable of the container's naming a file under a mount
            # (ANTDT_TLS_CERT=/etc/antdt/tls/tls.crt); not this kubelet's own (host paths).
            own = {e.get("name") for e in container.get("env") or []}
            env = [(name, podspec.map_host_paths([value], mounts)[0] if name in own else value)
                   for name, value in env]
            env = self._service_account_env(pod, state, env)
        except podspec.SpecError as e:
            self._set_waiting(state, e.reason, e.message)
            state.next_start = self.monotonic() + 1.0
            return
        unresolved = []
        rewritten_env = []
        for name, value in env:
            value, missing = podspec.rewrite_hosts(value, pods, services)
            rewritten_env.append((name, value))
            unresolved += missing
        rewritten_argv = []
        for arg in argv:
            arg, missing = podspec.rewrite_hosts(arg, pods, services)
            rewritten_argv.append(arg)
            unresolved += missing
        if unresolved:
            self._set_waiting(state, "ContainerCreating", "waiting for DNS: " + ",".join(sorted(set(unresolved))))
            state.next_start = self.monotonic() + _DNS_RETRY_S
            return
        argv = [binary] + rewritten_argv[1:]
        with open(os.path.join(state.sandbox, "cmdline.json"), "w") as f:
            json.dump({"argv": argv, "env": dict(rewritten_env)}, f, indent=1)
        state.proc = process.spawn(argv, state.sandbox, dict(rewritten_env), os.path.join(state.sandbox, "log"),
                                   cgroup_procs=self.cgroups.procs_file(state.node) if self.cgroups else None)
        state.started_at = now_rfc3339()
        state.started_mono = self.monotonic()
        state.ever_started = True
        state.waiting = None
        log("container_started", pod=state.key, pid=state.proc.pid, restarts=state.restart_count,
            argv=" ".join(argv))

    def _claim_dir(self, pod, name):
        """A persistentVolumeClaim's folder: WORK_DIR/claims/NAMESPACE/NAME, created once the claim
        exists in the API server (as if a provisioner bound it), kept after its pods are gone;
        SpecError (ContainerCreating, retried) while the claim does not exist."""
        ns = pod["metadata"]["namespace"]
        try:
            claim = self._api(pod["spec"].get("nodeName")).get(
                "/api/v1/namespaces/%s/persistentvolumeclaims/%s" % (ns, name))
        except Exception as e:  # noqa: BLE001
            raise podspec.SpecError("ContainerCreating", 'persistentvolumeclaim "%s": %s'
                                    % (name, "not found" if is_status(e, 404) else describe(e)))
        # A claim deleted and made again under its name is a new volume.
        directory = os.path.join(self.work_dir, "claims", ns, name + "-" + claim["metadata"]["uid"])
        os.makedirs(directory, exist_ok=True)
        return directory

    def _secret(self, pod, name, reason, failed):
        """The Secret `name` of the pod's namespace as {key: bytes} (data, then stringData), read
        from the API server; None when it does not exist; SpecError(reason, failed % (name,
        error)) when it cannot be read."""
        ns = pod["metadata"]["namespace"]
        try:
            secret = self._api(pod["spec"].get("nodeName")).get("/api/v1/namespaces/%s/secrets/%s" % (ns, name))
        except Exception as e:  # noqa: BLE001
            if is_status(e, 404):
                return None
            raise podspec.SpecError(reason, failed % (name, describe(e)))
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        for k, v in (secret.get("stringData") or {}).items():
            data.setdefault(k, v.encode("utf-8"))
        return data

    def _secret_data(self, pod, name, optional):
        """A secret volume's Secret as {key: bytes}; {} for a missing optional one; SpecError
        (ContainerCreating, retried) for a missing one, as a kubelet's MountVolume.SetUp fails."""
        failed = 'MountVolume.SetUp failed: secret "%s": %s'
        data = self._secret(pod, name, "ContainerCreating", failed)
        if data is None:
            if optional:
                return {}
            raise podspec.SpecError("ContainerCreating", failed % (name, "not found"))
        return data

    def _secret_key(self, pod, name, key, optional):
        """A secretKeyRef's value, read from the API server as the kubelet does; None for a missing
        optional one; SpecError (CreateContainerConfigError, retried) for a missing one."""
        data = self._secret(pod, name, "CreateContainerConfigError", "secret %s: %s")
        if data is None:
            if optional:
                return None
            raise podspec.SpecError("CreateContainerConfigError", 'secret "%s" not found' % name)
        if key in data:
            return data[key].decode("utf-8", "replace")
        if optional:
            return None
        raise podspec.SpecError("CreateContainerConfigError", "couldn't find key %s in Secret %s/%s"
                                % (key, pod["metadata"]["namespace"], name))

    def _service_account_env(self, pod, state, env):
        """env with the pod's ServiceAccount token where Kubernetes would mount one
        (automountServiceAccountToken, the pod's, else the ServiceAccount's, else true): a token
        from the TokenRequest API in a kubeconfig in the sandbox, $KUBECONFIG pointing there (a
        process cannot have its own /var/run/secrets/kubernetes.io/serviceaccount), and no
        KUBERNETES_SERVICE_* so that clients use it."""
        spec = pod["spec"]
        ns = pod["metadata"]["namespace"]
        api = self._api(spec.get("nodeName"))
        account = spec.get("serviceAccountName")
        mount = spec.get("automountServiceAccountToken")
        if not account:
            # No ServiceAccount named: the emulator has no per-namespace "default" ServiceAccount
            # (no controller makes them), so only an explicit automount asks for its token.
            if not mount:
                return env
            account = "default"
        if mount is None:
            try:
                sa = api.get("/api/v1/namespaces/%s/serviceaccounts/%s" % (ns, account))
                mount = sa.get("automountServiceAccountToken", True) is not False
            except Exception as e:  # noqa: BLE001
                if not is_status(e, 404):
                    raise podspec.SpecError("CreateContainerConfigError",
                                            "serviceaccount %s: %s" % (account, describe(e)))
                mount = False  # no such ServiceAccount here: nothing to mount
        if not mount:
            return env
        try:
            # Bound to the pod, as a kubelet's: NodeRestriction refuses a node any other token.
            bound = {"kind": "Pod", "apiVersion": "v1", "name": pod["metadata"]["name"],
                     "uid": pod["metadata"]["uid"]}
            issued = api.request("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (ns, account),
                                 {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                  "spec": {"expirationSeconds": 3600, "boundObjectRef": bound}})
        except Exception as e:  # noqa: BLE001
            raise podspec.SpecError("CreateContainerConfigError",
                                    "token for serviceaccount %s/%s: %s" % (ns, account, describe(e)))
        directory = os.path.join(state.sandbox, "serviceaccount")
        os.makedirs(directory, exist_ok=True)
        for name, value in (("token", issued["status"]["token"]), ("namespace", ns)):
            with open(os.path.join(directory, name), "w") as f:
                f.write(value)
        kubeconfig = os.path.join(directory, "kubeconfig")
        cluster = {"server": self.api.host}
        if getattr(self.api, "ca_file", None):
            cluster["certificate-authority"] = self.api.ca_file
        with open(kubeconfig, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "in-cluster",
                       "clusters": [{"name": "in-cluster", "cluster": cluster}],
                       "users": [{"name": account, "user": {"tokenFile": os.path.join(directory, "token")}}],
                       "contexts": [{"name": "in-cluster",
                                     "context": {"cluster": "in-cluster", "user": account, "namespace": ns}}]}, f)
        out = [(k, v) for k, v in env if k not in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")]
        return out + [("KUBECONFIG", kubeconfig)]

    def _set_waiting(self, state, reason, message):
        if state.waiting != (reason, message):
            log("container_waiting", pod=state.key, reason=reason, message=message)
        state.waiting = (reason, message)

    def _host_ip(self, state):
        return self.nodes[state.node]["hostIP"]

    # -- exits and deletion -----------------------------------------------------------------------

    def _on_exit(self, state, pod):
        process.signal_group(state.proc, signal.SIGKILL)  # the container's other processes go too
        code = process.exit_code(state.proc)
        state.proc = None
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                      "startedAt": state.started_at, "finishedAt": now_rfc3339()}
        policy = pod["spec"].get("restartPolicy") or "Always"
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            if self.monotonic() - state.started_mono > 10:
                state.backoff_s = 1.0
            state.restart_count += 1
            state.last_terminated = terminated
            state.next_start = self.monotonic() + state.backoff_s
            state.waiting = ("CrashLoopBackOff", "back-off %gs restarting failed container" % state.backoff_s)
            log("container_exited", pod=state.key, exit_code=code, restart_in_s=state.backoff_s)
            state.backoff_s = min(state.backoff_s * 2, 10.0)
        else:
            state.terminated = terminated
            log("container_exited", pod=state.key, exit_code=code,
                phase="Succeeded" if code == 0 else "Failed")

    def _terminate(self, state, pod):
        """Graceful deletion: SIGTERM, SIGKILL after min(grace, 10 s), then remove the object."""
        now = self.monotonic()
        if state.kill_deadline is None:
            grace = pod["metadata"].get("deletionGracePeriodSeconds")
            grace = min(30 if grace is None else grace, _MAX_GRACE_S)
            state.kill_deadline = now + grace
            if state.proc is not None:
                process.signal_group(state.proc, signal.SIGTERM)
            log("pod_terminating", pod=state.key, grace_s=grace, running=state.proc is not None)
        if state.proc is not None:
            if state.proc.poll() is None:
                if now >= state.kill_deadline and not state.sigkilled:
                    process.signal_group(state.proc, signal.SIGKILL)
                    state.sigkilled = True
                    log("container_killed", pod=state.key, signal="SIGKILL")
                return
            process.signal_group(state.proc, signal.SIGKILL)
            log("container_stopped", pod=state.key, exit_code=process.exit_code(state.proc))
            state.proc = None
        if not state.deleted:
            state.deleted = self._delete(state.key, state.uid, state.node)

    def _delete(self, key, uid, node):
        """DELETE with grace 0 and a UID precondition; True once done (or moot)."""
        ns, name = key.split("/", 1)
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        try:
            self._api(node).request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (ns, name), body)
            log("pod_deleted", pod=key)
        except Exception as e:  # noqa: BLE001
            if not (is_status(e, 404) or is_status(e, 409)):
                log("pod_delete_failed", pod=key, error=describe(e))
                return False
        return True

    def _forget(self, state):
        """The pod object is gone: kill at once, whatever the grace period."""
        if state.proc is not None:
            process.signal_group(state.proc, signal.SIGKILL)
            state.proc.wait(timeout=10)
            log("container_killed", pod=state.key, signal="SIGKILL", why="pod gone")
        self.ips.release(state.ip)
        log("pod_forgotten", pod=state.key)

    # -- status -------------------------------------------------------------------------------------

    def _condition(self, state, kind, ok, reason=None):
        status = "True" if ok else "False"
        previous = state.conditions.get(kind)
        if previous is None or previous[0] != status:
            state.conditions[kind] = (status, now_rfc3339())
        cond = {"type": kind, "status": status, "lastProbeTime": None,
                "lastTransitionTime": state.conditions[kind][1]}
        if reason and not ok:
            cond["reason"] = reason
        return cond

    def _desired_status(self, state, pod):
        container = pod["spec"]["containers"][0]
        running = state.proc is not None
        if state.terminated is not None:
            phase = "Succeeded" if state.terminated["exitCode"] == 0 else "Failed"
            container_state = {"terminated": state.terminated}
        elif running:
            phase = "Running"
            container_state = {"running": {"startedAt": state.started_at}}
        else:
            phase = "Running" if state.ever_started else "Pending"
            reason, message = state.waiting or ("ContainerCreating", "")
            container_state = {"waiting": {"reason": reason, "message": message} if message else {"reason": reason}}
        container_status = {"name": container["name"], "image": container.get("image", ""), "imageID": "",
                            "containerID": "", "ready": running, "restartCount": state.restart_count,
                            "started": running, "state": container_state,
                            "lastState": {"terminated": state.last_terminated} if state.last_terminated else {}}
        not_ready = "PodCompleted" if state.terminated else "ContainersNotReady"
        return {
            "phase": phase,
            "hostIP": self._host_ip(state),
            "hostIPs": [{"ip": self._host_ip(state)}],
            "podIP": state.ip,
            "podIPs": [{"ip": state.ip}],
            "startTime": state.start_time,
            "conditions": [self._condition(state, "PodScheduled", True),
                           self._condition(state, "Initialized", True),
                           self._condition(state, "ContainersReady", running, not_ready),
                           self._condition(state, "Ready", running, not_ready)],
            "containerStatuses": [container_status],
        }

    def _write_status(self, state, pod):
        desired = self._desired_status(state, pod)
        if desired == state.written or self.monotonic() < state.status_retry_at:
            return
        ns, name = state.key.split("/", 1)

        def mutate(obj):
            if obj["metadata"].get("uid") != state.uid:
                return None
            status = dict(obj.get("status") or {})
            ours = {c["type"] for c in desired["conditions"]}
            others = [c for c in status.get("conditions") or [] if c.get("type") not in ours]
            status.update(desired)
            status["conditions"] = desired["conditions"] + others
            if status == obj.get("status"):
                return None
            obj["status"] = status
            return obj

        try:
            path = "/api/v1/namespaces/%s/pods/%s" % (ns, name)
            self._api(state.node).update_with_retry(path, mutate, put_path=path + "/status")
        except Exception as e:  # noqa: BLE001 - written again on the next pass
            if not is_status(e, 404):
                log("status_write_failed", pod=state.key, error=describe(e))
            state.status_retry_at = self.monotonic() + 1.0
            return
        if (state.written or {}).get("phase") != desired["phase"]:
            log("pod_phase", pod=state.key, phase=desired["phase"], ip=state.ip)
        state.written = desired


def _key(pod):
    return "%s/%s" % (pod["metadata"].get("namespace"), pod["metadata"].get("name"))
