"""`antdt run --prometheus` of the quickstart job (a straggler, antdt-nd): a
real Prometheus (Debian's) scrapes every process of the job through the
runner's file-based discovery, evaluates antdt-rules.yaml, and

- every recording rule returns data for the job, none for another namespace;
- the job's own series carry its namespace and job (honor_labels: the job
  label is the job's, not the scrape's);
- `promtool check metrics` is clean on every endpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARDS = os.path.join(HERE, "..", "..", "helm", "antdt", "dashboards")
sys.path.insert(0, DASHBOARDS)
from queries import panel_queries  # noqa: E402  (the dashboards' own reader)

# Panels that a local job leaves empty: no cgroup watched by default, no GPU.
NEEDS_HARDWARE = {"cgroup CPU throttling", "GPU throttling"}

REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
RULES = os.path.join(HERE, "..", "antdt-rules.yaml")


def recording_rules() -> list:
    with open(RULES) as f:
        groups = yaml.safe_load(f)["groups"]
    return [r["record"] for g in groups for r in g["rules"] if "record" in r]


def dashboard_queries(namespace: str, job: str) -> dict:
    """expr -> the panel it is from, for every panel of every dashboard."""
    out = {}
    for name in sorted(os.listdir(DASHBOARDS)):
        if name.endswith(".json"):
            for title, expr in panel_queries(os.path.join(DASHBOARDS, name), namespace, job):
                if title not in NEEDS_HARDWARE:
                    out.setdefault(expr, f"{name}: {title}")
    return out


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def query(prometheus: str, expr: str) -> list:
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = json.loads(get(url))
    if body.get("status") != "success":
        raise AssertionError(f"{expr}: {body}")
    return body["data"]["result"]


@unittest.skipUnless(shutil.which("prometheus") and shutil.which("promtool"),
                     "needs Debian's prometheus (scripts/install-deps.sh installs it)")
class LocalPrometheusTest(unittest.TestCase):
    def setUp(self) -> None:
        self.antdt = os.path.join(os.environ.get("ANTDT_BIN_DIR", ""), "antdt")
        if not os.access(self.antdt, os.X_OK):
            self.skipTest(f"{self.antdt} is not built")
        self.dir = tempfile.mkdtemp(prefix="antdt-prometheus-")
        self.work = os.path.join(self.dir, "work")

    def tearDown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_rules_and_series_of_a_local_job(self) -> None:
        proc = subprocess.Popen(
            [self.antdt, "run", os.path.join(REPO, "examples", "jobs", "quickstart.yaml"),
             "--prometheus", "--quiet", "--work-dir", self.work],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        lines: list = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        try:
            self.check_while_running(proc, lines)
            proc.wait(timeout=200)  # the job goes on to its end
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=60)
            reader.join(timeout=10)
        self.assertEqual(proc.returncode, 0, "".join(lines))
        self.assertIn("RESULT: every record committed exactly once", "".join(lines))

    def test_a_restarted_worker_is_live_on_its_new_node_only(self) -> None:
        # quickstart with a rule that restarts its straggler on the spare node.
        with open(os.path.join(REPO, "examples", "jobs", "quickstart.yaml")) as f:
            job = yaml.safe_load(f)
        job["spec"]["stragglerPolicy"] = {
            "name": "custom", "minSavingRatio": 0,
            "rules": [{"signal": "score", "threshold": 1.3, "windows": 1,
                       "action": "KILL_RESTART", "budget": 1}]}
        job["spec"]["local"]["scenario"] = os.path.join(REPO, "examples", "scenarios",
                                                        "quickstart.yaml")
        manifest = os.path.join(self.dir, "job.yaml")
        with open(manifest, "w") as f:
            yaml.safe_dump(job, f)
        proc = subprocess.Popen([self.antdt, "run", manifest, "--prometheus", "--quiet",
                                 "--work-dir", self.work],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        lines: list = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        try:
            prometheus = self.wait_for_url(proc, lines)
            worker, from_node, to_node = self.wait_for_restart(proc, lines)
            # The old node's agent forgets the worker (three 2 s windows);
            # Prometheus marks its series stale at the next scrape.
            # While the old node's agent is up and scraped (at the job's end
            # every agent stops, and every series goes stale).
            # The Monitor's series follow the worker's reports from its new node
            # within a window or two of the agents'.
            nodes: set = set()
            health_nodes: set = set()
            old_agent = f'up{{component="agent",node="{from_node}"}} == 1'
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                live = query(prometheus, f'antdt_worker_steps_total{{worker="{worker}"}}')
                nodes = {r["metric"].get("node") for r in live}
                health = query(prometheus,
                               f'antdt_monitor_straggler_class{{worker="{worker}",role="worker"}}')
                health_nodes = {r["metric"]["node"] for r in health}
                if nodes == {to_node} and health_nodes == {to_node} and query(prometheus, old_agent):
                    break
                time.sleep(0.5)
            self.assertEqual(nodes, {to_node}, "".join(lines))
            self.assertEqual(health_nodes, {to_node}, "".join(lines))
            self.assertTrue(query(prometheus, old_agent), f"{from_node}'s agent still up")
            proc.wait(timeout=200)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=60)
            reader.join(timeout=10)
        self.assertEqual(proc.returncode, 0, "".join(lines))

    def wait_for_restart(self, proc: subprocess.Popen, lines: list) -> tuple:
        """(worker, node it left, node it went to) of the first KILL_RESTART line."""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            for line in list(lines):
                if " KILL_RESTART " in line and "restart on " in line:
                    worker = line.split(" KILL_RESTART ")[1].split(":")[0].strip()
                    from_node = line.split(" excluded until")[0].split()[-1]
                    return worker, from_node, line.split("restart on ")[1].split()[0]
            time.sleep(0.2)
        self.fail("no KILL_RESTART: " + "".join(lines))

    def check_while_running(self, proc: subprocess.Popen, lines: list) -> None:
        prometheus = self.wait_for_url(proc, lines)
        records = recording_rules()
        self.assertTrue(records)
        panels = dashboard_queries("default", "quickstart")
        self.assertGreater(len(panels), 20)
        panel_data: dict = {}
        found: dict = {}
        checked_metrics = False
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if not checked_metrics and self.targets_up(prometheus) >= 3:
                self.check_metrics_endpoints()
                checked_metrics = True
            for record in records:
                if record not in found:
                    result = query(prometheus,
                                   f'{record}{{namespace="default",job="quickstart"}}')
                    if result:
                        found[record] = result
            for expr, panel in panels.items():
                if expr not in panel_data and query(prometheus, expr):
                    panel_data[expr] = panel
            if checked_metrics and len(found) == len(records) and len(panel_data) == len(panels):
                break
            time.sleep(1)
        self.assertTrue(checked_metrics, "promtool check metrics ran on every endpoint")
        self.assertEqual(sorted(found), sorted(records), "every recording rule has data")
        self.assertEqual(sorted(set(panels.values()) - set(panel_data.values())), [],
                         "every dashboard panel's query returned data for the job")
        for record in records:  # another namespace's jobs: none of this one's data
            self.assertEqual(query(prometheus, f'{record}{{namespace="other"}}'), [], record)
        for expr, panel in dashboard_queries("other", "other-job").items():
            if "other" not in expr:
                continue  # a fleet-wide panel (e.g. agents connected)
            # Nothing of this job; a stat's `or vector(0)` may say 0.
            for sample in query(prometheus, expr):
                self.assertEqual((sample["metric"], sample["value"][1]), ({}, "0"),
                                 f"{panel}: {expr}")
        scores = query(prometheus, 'antdt_monitor_straggler_score{namespace="default"}')
        self.assertTrue(scores)
        self.assertEqual({s["metric"]["job"] for s in scores}, {"quickstart"},
                         "the job label is the job's (honor_labels), not the scrape's")
        self.assertNotIn("exported_job", scores[0]["metric"])

    def wait_for_url(self, proc: subprocess.Popen, lines: list) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for line in list(lines):
                if "prometheus on http://" in line:
                    return "http://" + line.split("prometheus on http://")[1].split()[0]
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        self.fail("no 'prometheus on' line: " + "".join(lines))

    def targets_up(self, prometheus: str) -> int:
        return len(query(prometheus, 'up{component=~"runner|sharding-service|agent"} == 1'))

    def check_metrics_endpoints(self) -> None:
        with open(os.path.join(self.work, "prometheus", "targets.json")) as f:
            targets = [t for group in json.load(f) for t in group["targets"]]
        self.assertGreaterEqual(len(targets), 3)
        for target in targets:
            text = get(f"http://{target}/metrics")
            check = subprocess.run(["promtool", "check", "metrics"], input=text,
                                   capture_output=True, timeout=30)
            self.assertEqual(check.returncode, 0,
                             f"{target}: {check.stdout.decode()} {check.stderr.decode()}")


if __name__ == "__main__":
    unittest.main()
