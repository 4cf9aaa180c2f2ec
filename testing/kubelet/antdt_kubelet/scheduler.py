"""A trivial scheduler: binds pods without spec.nodeName to the least-loaded feasible node."""

import time

from . import spec as podspec
from .api import describe, is_status, log

_RETRY_S = 1.0


class Scheduler:
    def __init__(self, api, nodes, monotonic=time.monotonic):
        self.api = api
        self.nodes = nodes  # [{"name", "labels"}]
        self.monotonic = monotonic
        self.assumed = {}  # uid -> node: bound, not yet seen bound in the cache
        self.next_try = {}  # uid -> monotonic time
        self.reported = set()  # uids whose Unschedulable condition is written

    def load(self, pods):
        """Pods per node: those bound (not finished) plus those this scheduler just bound."""
        load = {}
        for pod in pods:
            node = pod.get("spec", {}).get("nodeName") or self.assumed.get(pod["metadata"]["uid"])
            if node and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                load[node] = load.get(node, 0) + 1
        return load

    def sync(self, pods):
        uids = {p["metadata"]["uid"] for p in pods}
        for table in (self.assumed, self.next_try):
            for uid in [u for u in table if u not in uids]:
                del table[uid]
        self.reported &= uids
        for pod in pods:
            uid = pod["metadata"]["uid"]
            if pod.get("spec", {}).get("nodeName"):
                self.assumed.pop(uid, None)
                continue
            if (not podspec.wants_default_scheduler(pod) or uid in self.assumed
                    or self.monotonic() < self.next_try.get(uid, 0)):
                continue
            self._schedule(pod, self.load(pods))

    def _schedule(self, pod, load):
        meta = pod["metadata"]
        uid, key = meta["uid"], "%s/%s" % (meta["namespace"], meta["name"])
        node = podspec.pick_node(pod, self.nodes, load)
        if node is None:
            self.next_try[uid] = self.monotonic() + _RETRY_S
            if uid not in self.reported:
                self._report_unschedulable(pod)
            return
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            self.api.request("POST", "/api/v1/namespaces/%s/pods/%s/binding" % (meta["namespace"], meta["name"]),
                             body)
        except Exception as e:  # noqa: BLE001
            self.next_try[uid] = self.monotonic() + _RETRY_S
            if not (is_status(e, 404) or is_status(e, 409)):
                log("bind_failed", pod=key, node=node, error=describe(e))
            return
        self.assumed[uid] = node
        log("bind", pod=key, node=node)

    def _report_unschedulable(self, pod):
        meta = pod["metadata"]
        key = "%s/%s" % (meta["namespace"], meta["name"])
        message = "0/%d nodes are available: %d node(s) didn't match Pod's node affinity/selector." % (
            len(self.nodes), len(self.nodes))
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                     "lastProbeTime": None, "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

        def mutate(obj):
            if obj["metadata"].get("uid") != meta["uid"] or obj.get("spec", {}).get("nodeName"):
                return None
            status = dict(obj.get("status") or {})
            status.setdefault("phase", "Pending")
            status["conditions"] = [c for c in status.get("conditions") or []
                                    if c.get("type") != "PodScheduled"] + [condition]
            obj["status"] = status
            return obj

        try:
            self.api.update_with_retry("/api/v1/namespaces/%s/pods/%s/status" % (meta["namespace"], meta["name"]),
                                       mutate)
        except Exception as e:  # noqa: BLE001
            log("status_write_failed", pod=key, error=describe(e))
            return
        self.reported.add(meta["uid"])
        log("unschedulable", pod=key, message=message)
