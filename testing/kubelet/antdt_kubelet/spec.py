"""Pure functions over pod, service and node objects (plain dicts as the API serves them).

Nothing here does I/O, reads the clock or touches processes, so every rule is unit-tested directly:
$(VAR) expansion, env and fieldRef resolution, image-to-binary resolution (and the image's Python),
the cluster-DNS rewrite and the scheduling predicate.
"""

import os
import re


class SpecError(Exception):
    """The pod cannot run as written. `reason` is the container Waiting reason to report."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason
        self.message = message


# ---------------------------------------------------------------------------------------------
# $(VAR) expansion, as in kubernetes third_party/forked/golang/expansion/expand.go


def expand(text, variables):
    """Expands $(NAME) from `variables`; `$$` is a literal `$`; unknown or malformed references stay
    as written ("$(UNKNOWN)", "$(unclosed", "$x")."""
    out = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            nxt = text[cursor + 1]
            advance = 1
            if nxt == "$":
                out.append("$")
            elif nxt == "(":
                close = text.find(")", cursor + 2)
                if close < 0:
                    out.append("$(")
                else:
                    name = text[cursor + 2:close]
                    out.append(variables[name] if name in variables else "$(" + name + ")")
                    advance = close - cursor
            else:
                out.append("$" + nxt)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Environment


_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['([^']*)'\]$")


def field_ref(pod, path):
    """The value of a downward-API fieldRef.fieldPath (the paths Kubernetes allows for env)."""
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    status = pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.podIPs": ",".join(p.get("ip", "") for p in status.get("podIPs") or []),
        "status.hostIPs": ",".join(p.get("ip", "") for p in status.get("hostIPs") or []),
    }
    if path in simple:
        return simple[path]
    m = _LABEL_REF.match(path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    raise SpecError("CreateContainerConfigError", "unsupported fieldRef.fieldPath %r" % path)


def pod_hostname(pod):
    return (pod["spec"].get("hostname") or pod["metadata"]["name"])[:63]


def container_env(pod, container, base, secret_key=None):
    """The container's environment as an ordered list of (name, value).

    `base` (name -> value) holds what the runtime adds (HOSTNAME, KUBERNETES_SERVICE_*...): it comes
    first and, like Kubernetes' service variables, may be referenced by $(VAR) but is overridden by
    the container's own env. `secret_key(name, key)` gives a secretKeyRef's value (raising SpecError
    as the kubelet's CreateContainerConfigError when the Secret or key is missing)."""
    result = dict(base)
    defined = {}
    for var in container.get("env") or []:
        name = var["name"]
        if var.get("valueFrom"):
            source = var["valueFrom"]
            if source.get("fieldRef"):
                value = field_ref(pod, source["fieldRef"].get("fieldPath", ""))
            elif source.get("secretKeyRef") and secret_key is not None:
                ref = source["secretKeyRef"]
                value = secret_key(ref.get("name", ""), ref.get("key", ""), bool(ref.get("optional")))
                if value is None:
                    continue
            else:
                kinds = ",".join(sorted(source))
                raise SpecError("CreateContainerConfigError",
                                "env %s: valueFrom.%s is not supported by the test kubelet" % (name, kinds))
        else:
            lookup = dict(base)
            lookup.update(defined)
            value = expand(var.get("value") or "", lookup)
        defined[name] = value
        result[name] = value
    return list(result.items())


def container_argv(container, env):
    """command + args with $(VAR) expanded from the final environment."""
    variables = dict(env)
    return [expand(a, variables) for a in (container.get("command") or []) + (container.get("args") or [])]


# ---------------------------------------------------------------------------------------------
# Images


_IMAGES = {"antdt/antdt", "docker.io/antdt/antdt", "ghcr.io/antdt/antdt"}
#: The image's Python (Debian's, with python3-torch and the antdt SDK installed), and the
#: commands that run it.
SYSTEM_PYTHON = "/usr/bin/python3"
_PYTHON_COMMANDS = {"python3", SYSTEM_PYTHON}
#: Where the image holds AntDT's files (examples/...): the kubelet's --image-root stands for it.
IMAGE_ROOT = "/opt/antdt"


def image_repository(image):
    """`ghcr.io/antdt/antdt:v1@sha256:...` -> `ghcr.io/antdt/antdt`."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def resolve_binary(container, bin_dir):
    """The executable for the container: the project image runs `<bin_dir>/<command[0]>`, or its
    Python (`python3`, `/usr/bin/python3`) as this machine's SYSTEM_PYTHON."""
    image = container.get("image", "")
    if image_repository(image) not in _IMAGES:
        raise SpecError("ErrImagePull",
                        "image %r: the test kubelet runs only antdt/antdt or ghcr.io/antdt/antdt" % image)
    command = container.get("command") or []
    if not command:
        raise SpecError("ErrImagePull", "image %r: spec.containers[0].command must name an AntDT binary or python3"
                        % image)
    first = command[0]
    if first in _PYTHON_COMMANDS:
        return SYSTEM_PYTHON
    root = os.path.realpath(bin_dir)
    if "/" not in first:
        path = os.path.join(root, first)
    elif os.path.isabs(first) and os.path.dirname(os.path.realpath(first)) == root:
        path = os.path.realpath(first)
    else:
        raise SpecError("ErrImagePull", "command %r: must be a binary name from %s" % (first, bin_dir))
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise SpecError("ErrImagePull", "command %r: no executable %s in the image" % (first, path))
    return path


def sdk_dir(bin_dir):
    """The antdt Python package the build tree assembles beside its binaries (`build/python`), which
    stands for the SDK installed in the image."""
    return os.path.join(os.path.dirname(os.path.realpath(bin_dir)), "python")


def python_base_env(bin_dir):
    """What the image's Python adds to the runtime's variables: the SDK importable, and no bytecode
    written into the image (here: the repository)."""
    return {"PYTHONPATH": sdk_dir(bin_dir), "PYTHONDONTWRITEBYTECODE": "1"}


def keep_sdk_importable(env, bin_dir):
    """`env` (a list of (name, value)) with the SDK still on a PYTHONPATH the container set itself, as
    a package installed in the image's site-packages would be."""
    sdk = sdk_dir(bin_dir)
    out = []
    for name, value in env:
        if name == "PYTHONPATH" and sdk not in value.split(":"):
            value = value + ":" + sdk if value else sdk
        out.append((name, value))
    return out


def bind_to_pod_ip(argv, ip):
    """argv with `0.0.0.0:` (all addresses, which in a pod's own network namespace are the pod's)
    bound to the pod's IP instead: this kubelet's pods share the host's network."""
    return [a.replace("0.0.0.0:", ip + ":") for a in argv]


def host_path_mounts(pod, container, sandbox=None, secret_data=None, claim_dir=None):
    """(mountPath, path on this machine) for each of the container's mounts of a hostPath volume,
    and, given the pod's `sandbox`, of an emptyDir volume (SANDBOX/volumes/NAME, created: it lives
    and dies with the pod, as Kubernetes' does) and of a secret volume (its keys written as files
    there; `secret_data(name, optional)` gives the Secret's {key: bytes}, raising SpecError when
    it is missing) and of a persistentVolumeClaim volume (`claim_dir(name)`: the claim's folder on
    this machine, which outlives the pod as a provisioned volume does), longest first."""
    volumes = {v.get("name"): v for v in pod["spec"].get("volumes") or []}
    out = []
    for m in container.get("volumeMounts") or []:
        v = volumes.get(m.get("name"))
        mount = m["mountPath"].rstrip("/") or "/"
        if v and v.get("hostPath", {}).get("path"):
            out.append((mount, v["hostPath"]["path"].rstrip("/") or "/"))
        elif v is not None and "emptyDir" in v and sandbox:
            local = os.path.join(sandbox, "volumes", m["name"])
            os.makedirs(local, exist_ok=True)
            out.append((mount, local))
        elif v is not None and "persistentVolumeClaim" in v and claim_dir is not None:
            out.append((mount, claim_dir((v["persistentVolumeClaim"] or {}).get("claimName", ""))))
        elif v is not None and "secret" in v and sandbox and secret_data is not None:
            source = v["secret"] or {}
            local = os.path.join(sandbox, "volumes", m["name"])
            write_secret_volume(local, secret_data(source.get("secretName", ""), bool(source.get("optional"))),
                                source.get("items"))
            out.append((mount, local))
    return sorted(out, key=lambda mp: -len(mp[0]))


def write_secret_volume(directory, data, items=None):
    """A secret volume's files: each key (or each of `items`, key -> path) in `directory`."""
    os.makedirs(directory, exist_ok=True)
    paths = {i["key"]: i.get("path", i["key"]) for i in items} if items else {k: k for k in data}
    for key, path in paths.items():
        if key not in data:
            raise SpecError("ContainerCreating", "secret volume: no key %s" % key)
        target = os.path.join(directory, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(data[key])


def map_host_paths(argv, mounts):
    """argv with each argument under a hostPath mount moved to the host's path (the container
    reads the node's files there: e.g. --proc-root=/host/proc is /proc)."""
    out = []
    for arg in argv:
        prefix, _, path = arg.rpartition("=") if arg.startswith("--") and "=" in arg else ("", "", arg)
        for mount, host in mounts:
            if path == mount or path.startswith(mount + "/"):
                path = host + path[len(mount):]
                break
        out.append(prefix + ("=" if prefix else "") + path)
    return out


def map_image_paths(argv, image_root):
    """argv with every argument that is a path under IMAGE_ROOT (/opt/antdt/...) moved to
    `image_root` (the repository, whose examples/ the image holds); argv[0] is the executable."""
    out = [argv[0]] if argv else []
    for arg in argv[1:]:
        if arg == IMAGE_ROOT or arg.startswith(IMAGE_ROOT + "/"):
            if not image_root:
                raise SpecError("ErrImagePull", "argument %r: the image's %s needs the kubelet's --image-root"
                                % (arg, IMAGE_ROOT))
            arg = os.path.join(image_root, arg[len(IMAGE_ROOT) + 1:])
        out.append(arg)
    return out


# ---------------------------------------------------------------------------------------------
# Cluster DNS: <svc>.<ns>.svc[.cluster.local] and <hostname>.<subdomain>.<ns>.svc[.cluster.local]

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
HOST_RE = re.compile(r"(?<![A-Za-z0-9.-])((?:%s\.){2,3})svc(?:\.cluster\.local)?(?![A-Za-z0-9-]|\.[A-Za-z0-9])"
                     % _LABEL)


def selector_matches(selector, labels):
    """A Service's spec.selector (equality map) against pod labels; an empty selector selects nothing."""
    return bool(selector) and all((labels or {}).get(k) == v for k, v in selector.items())


def _is_endpoint(pod):
    """A pod that can back DNS answers: alive, with an IP (readiness is not required)."""
    status = pod.get("status", {})
    return (not pod["metadata"].get("deletionTimestamp") and status.get("podIP")
            and status.get("phase") not in ("Succeeded", "Failed"))


def _named_pods(host, pods, services):
    """Every pod (in any state) a cluster DNS name stands for, or None when its Service does not exist.

    A service name stands for the pods its selector selects; `hostname.subdomain.ns` for those of them
    with that spec.hostname and spec.subdomain (the headless Service `subdomain` must select them)."""
    labels = host.split(".")
    labels = labels[:labels.index("svc")]
    namespace = labels[-1]
    service_name = labels[-2]
    service = next((s for s in services if s["metadata"].get("namespace") == namespace
                    and s["metadata"]["name"] == service_name), None)
    if service is None:
        return None
    selector = service.get("spec", {}).get("selector") or {}
    named = [p for p in pods if p["metadata"].get("namespace") == namespace
             and selector_matches(selector, p["metadata"].get("labels"))]
    if len(labels) == 3:
        named = [p for p in named if p["spec"].get("hostname") == labels[0]
                 and p["spec"].get("subdomain") == service_name]
    return named


def resolve_host(host, pods, services):
    """The pod IP a cluster DNS name resolves to (its lowest-named live pod), or None."""
    alive = sorted((p for p in _named_pods(host, pods, services) or [] if _is_endpoint(p)),
                   key=lambda p: p["metadata"]["name"])
    return alive[0]["status"]["podIP"] if alive else None


def never_resolves(host, pods, services):
    """True when every pod the name stands for has Succeeded: none will run under it again (the
    operator never restarts a worker that succeeded, e.g. MASTER_ADDR's worker-0 once it is done).
    A real kubelet starts a container whatever its names resolve to; this one waits for names that
    may still resolve, and gives up on these."""
    named = _named_pods(host, pods, services)
    return bool(named) and all(p.get("status", {}).get("phase") == "Succeeded" for p in named)


def rewrite_hosts(text, pods, services):
    """`text` with every cluster DNS name replaced by its IP, and the names that did not resolve
    (yet: a name that never resolves stays as written, and is not among them)."""
    unresolved = []

    def replace(match):
        ip = resolve_host(match.group(0), pods, services)
        if ip is not None:
            return ip
        if not never_resolves(match.group(0), pods, services):
            unresolved.append(match.group(0))
        return match.group(0)

    return HOST_RE.sub(replace, text), unresolved


# ---------------------------------------------------------------------------------------------
# Scheduling


def _requirement_matches(req, value_of):
    key, op, values = req.get("key"), req.get("operator"), req.get("values") or []
    value = value_of(key)
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            a, b = int(value), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def _term_matches(term, node):
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches no node
    labels = node.get("labels") or {}
    node_fields = {"metadata.name": node["name"]}
    return (all(_requirement_matches(r, labels.get) for r in expressions)
            and all(_requirement_matches(r, node_fields.get) for r in fields))


def node_fits(pod, node):
    """spec.nodeSelector and required node affinity (terms ORed, expressions ANDed).
    `node` is {"name": ..., "labels": {...}}."""
    spec = pod.get("spec", {})
    labels = node.get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is not None:
        return any(_term_matches(t, node) for t in required.get("nodeSelectorTerms") or [])
    return True


def pick_node(pod, nodes, load):
    """The feasible node with the fewest pods (`load`: name -> count), ties by name; None if none fits."""
    feasible = [n for n in nodes if node_fits(pod, n)]
    if not feasible:
        return None
    return min(feasible, key=lambda n: (load.get(n["name"], 0), n["name"]))["name"]


def wants_default_scheduler(pod):
    spec = pod.get("spec", {})
    return (not spec.get("nodeName") and spec.get("schedulerName", "default-scheduler") in ("", "default-scheduler")
            and not pod["metadata"].get("deletionTimestamp")
            and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"))
