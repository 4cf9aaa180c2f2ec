#!/usr/bin/python3
"""Debian's python3-kubernetes (22.6) against the real control plane (antdt_control_plane.py;
exit 77, SKIPPED, where it is not built): typed lists and creates, CRDs and custom objects,
Watch().stream MODIFIED events, 409 on a stale replace, and the 410 ApiException for a
resource version etcd compacted. Run with /usr/bin/python3."""

import os
import sys
import threading
import time
import unittest

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gizmos.pytest.antdt.io"},
    "spec": {
        "group": "pytest.antdt.io",
        "scope": "Namespaced",
        "names": {"kind": "Gizmo", "plural": "gizmos", "singular": "gizmo"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
                }}},
        }],
    },
}


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import antdt_control_plane as acp  # noqa: E402
from kubernetes import config as kconfig  # noqa: E402


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Watches read from etcd, whose compaction this test makes.
        cls.plane = acp.ControlPlane(apiserver_args=["--watch-cache=false"]).start()
        print("control plane %s ready in %.1f s" % (cls.plane.version, cls.plane.start_seconds), file=sys.stderr)
        cls.api = kconfig.new_client_from_config(config_file=cls.plane.kubeconfig)
        cls.core = client.CoreV1Api(cls.api)
        cls.custom = client.CustomObjectsApi(cls.api)
        cls.ext = client.ApiextensionsV1Api(cls.api)

    @classmethod
    def tearDownClass(cls):
        cls.api.close()
        cls.plane.__exit__(None, None, None)

    def namespace(self, name):
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        return name

    def test_typed_list_create_and_watch_configmaps(self):
        ns = self.namespace("py-typed")
        cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings", labels={"app": "py"}),
                                data={"k": "v"})
        created = self.core.create_namespaced_config_map(ns, cm)
        self.assertEqual(created.metadata.name, "settings")
        self.assertTrue(created.metadata.uid)
        listed = self.core.list_namespaced_config_map(ns, label_selector="app=py")
        self.assertEqual([c.metadata.name for c in listed.items], ["settings"])
        namespaces = [n.metadata.name for n in self.core.list_namespace().items]
        self.assertIn(ns, namespaces)

        def change():
            time.sleep(0.5)
            self.core.patch_namespaced_config_map("settings", ns, {"data": {"k": "w"}})

        threading.Thread(target=change).start()
        seen = []
        w = watch.Watch()
        for event in w.stream(self.core.list_namespaced_config_map, ns,
                              resource_version=listed.metadata.resource_version,
                              timeout_seconds=20):
            seen.append((event["type"], event["object"].data.get("k")))
            if event["type"] == "MODIFIED":
                w.stop()
        self.assertIn(("MODIFIED", "w"), seen)

    def test_crd_and_custom_objects(self):
        crd = self.ext.create_custom_resource_definition(CRD)
        self.assertEqual(crd.metadata.name, "gizmos.pytest.antdt.io")
        got = self.ext.read_custom_resource_definition("gizmos.pytest.antdt.io")
        for _ in range(100):  # the real server establishes a CRD a moment after creating it
            established = [c.status for c in got.status.conditions or [] if c.type == "Established"]
            if established == ["True"]:
                break
            time.sleep(0.1)
            got = self.ext.read_custom_resource_definition("gizmos.pytest.antdt.io")
        self.assertEqual(established, ["True"])

        ns = self.namespace("py-custom")
        args = ("pytest.antdt.io", "v1", ns, "gizmos")
        obj = self.custom.create_namespaced_custom_object(*args, {
            "apiVersion": "pytest.antdt.io/v1", "kind": "Gizmo",
            "metadata": {"name": "g1"}, "spec": {"size": 1, "unknown": "pruned"}})
        self.assertEqual(obj["metadata"]["generation"], 1)
        self.assertNotIn("unknown", obj["spec"])
        listed = self.custom.list_namespaced_custom_object(*args)
        rv = listed["metadata"]["resourceVersion"]
        self.assertEqual([i["metadata"]["name"] for i in listed["items"]], ["g1"])

        def change():
            time.sleep(0.5)
            self.custom.patch_namespaced_custom_object(*args, "g1", {"spec": {"size": 2}})

        threading.Thread(target=change).start()
        w = watch.Watch()
        modified = None
        for event in w.stream(self.custom.list_namespaced_custom_object, *args,
                              resource_version=rv, timeout_seconds=20):
            if event["type"] == "MODIFIED":
                modified = event["object"]
                w.stop()
        self.assertIsNotNone(modified)
        self.assertEqual(modified["spec"]["size"], 2)
        self.assertEqual(modified["metadata"]["generation"], 2)

        # Status subresource: the spec part of a status patch is ignored.
        patched = self.custom.patch_namespaced_custom_object_status(
            *args, "g1", {"status": {"phase": "Running"}, "spec": {"size": 9}})
        self.assertEqual(patched["status"]["phase"], "Running")
        self.assertEqual(patched["spec"]["size"], 2)

        self.custom.delete_namespaced_custom_object(*args, "g1")
        with self.assertRaises(ApiException) as ctx:
            self.custom.get_namespaced_custom_object(*args, "g1")
        self.assertEqual(ctx.exception.status, 404)

    def test_watch_from_compacted_resource_version_raises_410(self):
        ns = self.namespace("py-expired")
        self.core.create_namespaced_config_map(
            ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="a")))
        old_rv = self.core.list_namespaced_config_map(ns).metadata.resource_version
        for i in range(3):
            self.core.patch_namespaced_config_map("a", ns, {"data": {"i": str(i)}})
        self.plane.compact_etcd()
        w = watch.Watch()
        with self.assertRaises(ApiException) as ctx:
            for _ in w.stream(self.core.list_namespaced_config_map, ns,
                              resource_version=old_rv, timeout_seconds=20):
                pass
        self.assertEqual(ctx.exception.status, 410)
        self.assertIn("Expired", str(ctx.exception.reason))

        # Without timeout_seconds the client retries once, then raises.
        w = watch.Watch()
        with self.assertRaises(ApiException) as ctx:
            for _ in w.stream(self.core.list_namespaced_config_map, ns, resource_version=old_rv):
                pass
        self.assertEqual(ctx.exception.status, 410)

    def test_conflict_on_stale_replace(self):
        ns = self.namespace("py-conflict")
        cm = self.core.create_namespaced_config_map(
            ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"), data={"a": "1"}))
        cm.data = {"a": "2"}
        self.core.replace_namespaced_config_map("c", ns, cm)
        cm.data = {"a": "3"}
        with self.assertRaises(ApiException) as ctx:
            self.core.replace_namespaced_config_map("c", ns, cm)
        self.assertEqual(ctx.exception.status, 409)


if __name__ == "__main__":
    acp.exit_skipped_unless_built()
    unittest.main(verbosity=2)
