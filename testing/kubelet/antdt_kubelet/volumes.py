"""A local-volume provisioner, as a cluster without a storage driver gets one (rancher's
local-path-provisioner, say): for each PersistentVolumeClaim that waits for a volume, a
PersistentVolume of its size, pre-bound to it, which the controller-manager's PV controller then
binds. The test kubelet keeps the claim's files under its work directory (kubelet.py, _claim_dir);
the volume names that folder as its hostPath."""

import os

from .api import describe, is_status, log


def volume_name(claim):
    return "pvc-" + claim["metadata"]["uid"]


def wants_volume(claim):
    """Pending, not bound to a volume, not being deleted."""
    return (not claim.get("spec", {}).get("volumeName")
            and (claim.get("status") or {}).get("phase", "Pending") == "Pending"
            and not claim["metadata"].get("deletionTimestamp"))


def volume_for(claim, work_dir):
    meta, spec = claim["metadata"], claim.get("spec") or {}
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    path = os.path.join(work_dir, "claims", meta["namespace"], meta["name"] + "-" + meta["uid"])
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": volume_name(claim), "labels": {"antdt.io/provisioned-by": "antdt-test-kubelet"}},
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "storageClassName": spec.get("storageClassName") or "",
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": path, "type": "DirectoryOrCreate"},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                         "name": meta["name"], "uid": meta["uid"]},
        },
    }


class Provisioner:
    """sync(claims) creates the volume of each claim that wants one, once."""

    def __init__(self, api, work_dir):
        self.api = api
        self.work_dir = work_dir
        self.made = set()  # volume names created (or found existing)

    def sync(self, claims):
        for claim in claims:
            name = volume_name(claim)
            if name in self.made or not wants_volume(claim):
                continue
            try:
                self.api.request("POST", "/api/v1/persistentvolumes", volume_for(claim, self.work_dir))
                log("volume_provisioned", volume=name,
                    claim="%s/%s" % (claim["metadata"]["namespace"], claim["metadata"]["name"]))
            except Exception as e:  # noqa: BLE001 - tried again on the next pass
                if not is_status(e, 409):
                    log("volume_provision_failed", volume=name, error=describe(e))
                    continue
            self.made.add(name)
