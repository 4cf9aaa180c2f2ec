"""`antdt run --prometheus` of the quickstart job (a straggler, antdt-nd): a
real Prometheus (Debian's) scrapes every process of the job through the
runner's file-based discovery, evaluates antdt-rules.yaml, and

- every recording rule returns data for the job, none for another namespace;
- every query of every dashboard panel returns data for the job, but those
  of the panels of EMPTY_FOR_A_REASON (documented in docs/observability.md);
- Prometheus scrapes every process before the workers start;
- the job's own series carry its namespace and job (honor_labels: the job
  label is the job's, not the scrape's), and no series the scrape's job;
- a restarted worker's series on its old node end at the restart;
- the terminal, report.json and Prometheus name the same stragglers with the
  same class and cause (cpu_throttling, measured, for the quickstart's CPU
  quota on node-2);
- every series of antdt_controller_actions_total exists at 0 before the
  job's first action (a series born at 1 loses it in rate() and increase()),
  and the job's last scrape counts as many actions as the report lists;
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
import urllib.error
import urllib.parse
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARDS = os.path.join(HERE, "..", "..", "helm", "antdt", "dashboards")
sys.path.insert(0, DASHBOARDS)
from queries import panel_queries  # noqa: E402  (the dashboards' own reader)

# Panels a local job may leave empty, and why; docs/observability.md names each
# (a test below checks it does). Every other panel's every query has data.
EMPTY_FOR_A_REASON = {
    "GPU throttling": "no NVIDIA GPU the agent can read through NVML",
    "cgroup CPU throttling": "the agent can read none of the workers' cgroups (no cgroup "
                             "filesystem under its --cgroup-root, as in some containers)",
    "Slow nodes (node memory)": "the cluster's node memory is the operator's; `antdt run` "
                                "keeps each job's own and exports none",
}

REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
OBSERVABILITY = os.path.join(REPO, "docs", "observability.md")
RULES = os.path.join(HERE, "..", "antdt-rules.yaml")


def recording_rules() -> list:
    with open(RULES) as f:
        groups = yaml.safe_load(f)["groups"]
    return [r["record"] for g in groups for r in g["rules"] if "record" in r]


def dashboard_queries(namespace: str, job: str) -> dict:
    """expr -> the panel it is from, for every query of every panel of every
    dashboard but those of EMPTY_FOR_A_REASON."""
    out = {}
    for name in sorted(os.listdir(DASHBOARDS)):
        if name.endswith(".json"):
            for title, expr in panel_queries(os.path.join(DASHBOARDS, name), namespace, job):
                if title not in EMPTY_FOR_A_REASON:
                    out.setdefault(expr, f"{name}: {title}")
    return out


def raw_samples(prometheus: str, selector: str, seconds: int) -> list:
    """[(timestamp, value)] of every series of `selector` over the last `seconds`."""
    return [(float(t), v) for series in query(prometheus, f"{selector}[{seconds}s]")
            for t, v in series["values"]]


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
    def test_every_panel_left_empty_is_documented(self) -> None:
        with open(OBSERVABILITY) as f:
            doc = f.read()
        for title, reason in EMPTY_FOR_A_REASON.items():
            self.assertIn(f'"{title}"', doc, f"docs/observability.md: why {title} may be empty")
        titles = {t for name in os.listdir(DASHBOARDS) if name.endswith(".json")
                  for t, _ in panel_queries(os.path.join(DASHBOARDS, name), "ns", "j")}
        self.assertLessEqual(set(EMPTY_FOR_A_REASON), titles, "no such panel")

    def setUp(self) -> None:
        self.antdt = os.path.join(os.environ.get("ANTDT_BIN_DIR", ""), "antdt")
        if not os.access(self.antdt, os.X_OK):
            self.skipTest(f"{self.antdt} is not built")
        self.dir = tempfile.mkdtemp(prefix="antdt-prometheus-")
        self.work = os.path.join(self.dir, "work")

    def tearDown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_rules_and_series_of_a_local_job(self) -> None:
        report = os.path.join(self.dir, "report")
        proc = subprocess.Popen(
            [self.antdt, "run", os.path.join(REPO, "examples", "jobs", "quickstart.yaml"),
             "--prometheus", "--quiet", "--work-dir", self.work, "--report", report],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        lines: list = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        try:
            prometheus = self.check_while_running(proc, lines)
            actions: dict = {}  # series -> [first value, last value] of the actions counter
            seen = self.watch_stragglers(proc, prometheus, actions)  # to the job's end
            proc.wait(timeout=200)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=60)
            reader.join(timeout=10)
        self.assertEqual(proc.returncode, 0, "".join(lines))
        self.assertIn("RESULT: every record committed exactly once", "".join(lines))
        self.check_one_account(seen, "".join(lines), os.path.join(report, "report.json"))
        self.check_actions_counted(actions, os.path.join(report, "report.json"))

    def check_actions_counted(self, actions: dict, report_json: str) -> None:
        """Each actions series was first seen at 0; their sum at the last
        scrape is the number of actions report.json lists."""
        with open(report_json) as f:
            listed = [a for a in json.load(f)["actions"]
                      if not (a["action"] == "ADJUST_BS" and a["subject"] == "")]
        self.assertTrue(listed, "the quickstart's straggler is acted on")
        self.assertTrue(actions, "antdt_controller_actions_total scraped")
        for series, (first, _) in actions.items():
            self.assertEqual(first, 0.0, f"{series} was born at {first}, not 0")
        self.assertEqual(sum(last for _, last in actions.values()), len(listed),
                         f"Prometheus {actions} vs report.json {listed}")

    @staticmethod
    def stopping(prometheus: str) -> bool:
        """Whether the Prometheus of the job no longer serves (shutting down)."""
        try:
            get(f"{prometheus}/-/ready", timeout=2)
            return False
        except (urllib.error.URLError, ConnectionError):
            return True

    def watch_stragglers(self, proc: subprocess.Popen, prometheus: str, actions: dict) -> dict:
        """worker -> (node, class, cause) of its last straggling scrape, as
        antdt_monitor_straggler_info says (the per-sample class while
        compensated, as the Monitor's record has it). Into `actions`: each
        series of antdt_controller_actions_total, its first and last value."""
        seen: dict = {}
        ours = 'namespace="default",job="quickstart"'
        while proc.poll() is None:
            try:
                # The first value from Prometheus's own samples (min of a
                # counter), the last from now.
                for i, expr in enumerate([
                        f'min_over_time(antdt_controller_actions_total{{{ours}}}[1h])',
                        f'antdt_controller_actions_total{{{ours}}}']):
                    for s in query(prometheus, expr):
                        labels = {k: v for k, v in s["metric"].items() if k != "__name__"}
                        key = json.dumps(labels, sort_keys=True)
                        actions.setdefault(key, [None, 0.0])[i] = float(s["value"][1])
                series = query(prometheus, f'antdt_monitor_straggler_info{{{ours},cause!="none"}}')
            except (urllib.error.URLError, ConnectionError):
                # The job's end stops its Prometheus (503 while it shuts down,
                # then refused) a moment before `antdt run` exits.
                if proc.poll() is None:
                    time.sleep(0.5)
                    if proc.poll() is None and not self.stopping(prometheus):
                        raise
                break
            for s in series:
                m = s["metric"]
                cls = m["speed_class"] if m["compensated"] == "true" else m["class"]
                seen[m["worker"]] = (m["node"], cls, m["cause"])
            time.sleep(0.5)
        return seen

    def check_one_account(self, seen: dict, terminal: str, report_json: str) -> None:
        """The terminal, report.json and Prometheus tell of the same
        stragglers, each with the same class and cause; the quickstart's CPU
        quota on node-2 is measured as cpu_throttling."""
        with open(report_json) as f:
            records = json.load(f)["stragglers"]
        self.assertTrue(records, terminal)
        last = {r["worker"]: r for r in records}  # a worker's latest record
        self.assertIn("worker-2", last, terminal)
        if "emulated instead" in terminal:  # no cgroup to cap here: nothing to measure
            self.assertEqual((last["worker-2"]["node"], last["worker-2"]["cause"]),
                             ("node-2", "unknown"), last["worker-2"])
        else:
            self.assertEqual((last["worker-2"]["node"], last["worker-2"]["cause"]),
                             ("node-2", "cpu_throttling"), last["worker-2"])
            self.assertGreater(last["worker-2"]["evidence"]["cgroup_throttled_fraction"], 0.2)
        for r in records:  # every record on the terminal, with its class and cause
            self.assertIn(f"\n  {r['worker']} on {r['node']} {r['class'].upper()}: slow from "
                          f"{r['first_seen_seconds']:.1f} s", terminal)
            line = terminal.split(f"\n  {r['worker']} on {r['node']} {r['class'].upper()}: slow "
                                  f"from {r['first_seen_seconds']:.1f} s")[1].split("\n")[0]
            self.assertIn(f"; cause {r['cause']}", line)
        self.assertIn("worker-2", seen, "Prometheus saw the straggler")
        for worker, (node, cls, cause) in seen.items():
            self.assertIn(worker, last, f"{worker} straggled in Prometheus, not in the report")
            self.assertEqual((node, cls, cause),
                             (last[worker]["node"], last[worker]["class"], last[worker]["cause"]),
                             f"{worker}: Prometheus vs report.json")

    def test_a_restarted_worker_is_live_on_its_new_node_only(self) -> None:
        # quickstart with a rule that restarts its straggler on the spare node.
        with open(os.path.join(REPO, "examples", "jobs", "quickstart.yaml")) as f:
            job = yaml.safe_load(f)
        job["spec"]["stragglerPolicy"] = {
            "name": "custom", "minSavingRatio": 0,
            "rules": [{"signal": "score", "threshold": 1.3, "windows": 1,
                       "action": "KILL_RESTART", "budget": 1}]}
        # An emulated slowdown (the speed file): what this test is about is
        # the restart's series, not the cause.
        with open(os.path.join(REPO, "examples", "scenarios", "quickstart.yaml")) as f:
            scenario = yaml.safe_load(f)
        for slowdown in scenario["slowdowns"]:
            slowdown["via"] = "emulated"
        job["spec"]["local"]["scenario"] = os.path.join(self.dir, "scenario.yaml")
        with open(job["spec"]["local"]["scenario"], "w") as f:
            yaml.safe_dump(scenario, f)
        job["spec"]["local"]["deviceWork"] = "sleep"
        job["spec"]["local"]["deviceTimePerSample"] = "2ms"
        manifest = os.path.join(self.dir, "job.yaml")
        with open(manifest, "w") as f:
            yaml.safe_dump(job, f)
        proc = subprocess.Popen([self.antdt, "run", manifest, "--prometheus", "--quiet",
                                 "--work-dir", self.work, "--no-report"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        lines: list = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        try:
            prometheus = self.wait_for_url(proc, lines)
            worker, from_node, to_node = self.wait_for_restart(proc, lines)
            restarted_at = time.time()  # within 0.2 s of the restart line
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
            # The old incarnation's series end at the restart: its agent drops
            # them once its process has ended (not after the idle time of
            # three windows, at least 5 s), so no panel counts it twice.
            old = raw_samples(prometheus, f'antdt_worker_samples_per_second{{worker="{worker}",'
                                          f'node="{from_node}"}}', 300)
            self.assertTrue(old, "the worker had series on its old node")
            self.assertLess(max(t for t, _ in old) - restarted_at, 3.5,
                            f"{worker}'s series on {from_node} outlived its restart")
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

    def check_while_running(self, proc: subprocess.Popen, lines: list) -> str:
        prometheus = self.wait_for_url(proc, lines)
        # Prometheus scraped every process before the workers started (its
        # discovery takes 5-10 s): the job's first second is in it.
        self.assertGreaterEqual(self.targets_up(prometheus), 3,
                                "every target scraped before the job started")
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
        self.assertEqual(sorted(f"{panel}: {expr}" for expr, panel in panels.items()
                                if expr not in panel_data), [],
                         "every query of every dashboard panel returned data for the job")
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
        # One meaning per label: no series has the scrape's job; a node's
        # series (no job of their own) have none.
        self.assertEqual(query(prometheus, 'count({job="antdt-local"})'), [])
        nodes = query(prometheus, "antdt_node_cpu_utilization_ratio")
        self.assertTrue(nodes)
        self.assertEqual([n["metric"] for n in nodes if "job" in n["metric"]], [])
        # The stragglers counted are the members straggling, by batch time or
        # per sample (compensated), as each member's info says (one scrape).
        ours = 'namespace="default",job="quickstart"'
        diff = query(prometheus, f'count(antdt_monitor_straggler_info{{{ours},cause!="none"}})'
                                 f' - sum(antdt_monitor_stragglers{{{ours}}})')
        self.assertEqual([d["value"][1] for d in diff], ["0"] if diff else [])
        return prometheus

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
