"""`antdt run` of the PyTorch example with a real CPU straggler: node-1's rank
is capped to a third of a core by a cgroup v1 quota; the agent sees the
throttling, the Monitor names the rank a straggler with cause CPU_THROTTLING,
antdt-nd moves samples away from it, and every record is committed exactly
once (the ranks' journals). Needs root (the cgroup) and Debian's python3-torch.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import unittest

try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover
    torch = None

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CGROUP = "/sys/fs/cgroup/cpu"


def job_yaml(records: int) -> str:
    """examples/pytorch/job.yaml, smaller, with absolute paths."""
    with open(os.path.join(REPO, "examples", "pytorch", "job.yaml")) as f:
        text = f.read()
    text = text.replace("records: 49152", f"records: {records}").replace("epochs: 3", "epochs: 2")
    text = text.replace("args: [train.py]",
                        f"args: [{os.path.join(REPO, 'examples', 'pytorch', 'train.py')}]")
    return text.replace("scenario: ../scenarios/pytorch-cpu-quota.yaml",
                        "scenario: " + os.path.join(REPO, "examples", "scenarios",
                                                    "pytorch-cpu-quota.yaml"))


def logs_tail(work: str) -> str:
    """The end of every log in the job's work directory: the workers' and the
    runner's at length, the others' briefly."""
    names = sorted(n for n in os.listdir(work) if n.endswith(".log")) if os.path.isdir(work) else []
    names.sort(key=lambda n: not n.startswith(("worker-", "antdt-run")))
    parts = []
    for name in names:
        chars = 4000 if name.startswith(("worker-", "antdt-run")) else 800
        with open(os.path.join(work, name), errors="replace") as f:
            parts.append(f"--- {name} (end)\n{f.read()[-chars:]}")
    return "\n".join(parts)


@unittest.skipIf(torch is None, "needs Debian's python3-torch (/usr/bin/python3)")
@unittest.skipUnless(os.access(CGROUP, os.W_OK),
                     f"{CGROUP} is not writable: the cpu-quota straggler needs root and the "
                     "cgroup v1 cpu controller")
class AntdtRunPytorchTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="antdt-run-pytorch-")
        self.antdt = os.path.join(os.environ.get("ANTDT_BIN_DIR", ""), "antdt")
        if not os.access(self.antdt, os.X_OK):
            self.skipTest(f"{self.antdt} is not built")

    def tearDown(self) -> None:
        if not os.environ.get("ANTDT_TEST_KEEP"):  # set it to look at a job's files
            shutil.rmtree(self.dir, ignore_errors=True)

    def run_job(self, manifest: str, report: str, work: str) -> subprocess.CompletedProcess:
        """`antdt run` in its own session: on a timeout the whole process
        group goes (no orphaned worker or agent), and the failure carries the
        tail of every log of the job."""
        proc = subprocess.Popen([self.antdt, "run", manifest, "--report", report, "--work-dir",
                                 work], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=200)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            self.fail(f"antdt run timed out after 200 s; its output:\n{out[-3000:]}\n"
                      + logs_tail(work))
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")

    def test_cpu_quota_straggler_named_and_mitigated(self) -> None:
        manifest = os.path.join(self.dir, "job.yaml")
        with open(manifest, "w") as f:
            f.write(job_yaml(24576))
        report = os.path.join(self.dir, "report")
        work = os.path.join(self.dir, "work")
        run = self.run_job(manifest, report, work)
        out = run.stdout
        self.assertEqual(run.returncode, 0, out + logs_tail(work))
        self.assertIn("0 parameter servers", out)
        self.assertIn("RESULT: every record committed exactly once", out)
        with open(os.path.join(report, "report.json")) as f:
            r = json.load(f)
        slow = [p for p in r["timeline"] if p["worker"] == "worker-1"
                and p["class"] in ("transient", "persistent")]
        self.assertTrue(slow, "worker-1 named a straggler")
        self.assertIn("cpu_throttling", {p["cause"] for p in slow},
                      "the cause, from the agent's cgroup samples")
        others = [p for p in r["timeline"] if p["worker"] != "worker-1"]
        self.assertNotIn("cpu_throttling", {p["cause"] for p in others})
        # The Monitor's record of it says the same, with the value behind it.
        records = [s for s in r["stragglers"] if s["worker"] == "worker-1"]
        self.assertIn("cpu_throttling", {s["cause"] for s in records}, r["stragglers"])
        self.assertTrue(all(s["worker"] == "worker-1" or s["cause"] != "cpu_throttling"
                            for s in r["stragglers"]), r["stragglers"])
        named = [s for s in records if s["cause"] == "cpu_throttling"]
        self.assertGreater(named[0]["evidence"]["cgroup_throttled_fraction"], 0.2)
        def batches(action):  # "local batch 128 -> 70 (...)" in the reason
            text = action["reason"].split("local batch ")[1].split(" (")[0]
            return tuple(int(x) for x in text.split(" -> "))

        mine = [a for a in r["actions"] if a["action"] == "ADJUST_BS"
                and a["worker"] == "worker-1"]
        mitigations = [a for a in mine if "transient" in a["rule"] or "persistent" in a["rule"]]
        self.assertTrue(mitigations, r["actions"])
        for action in mitigations:
            before, after = batches(action)
            self.assertLess(after, before, f"samples moved away from the capped rank: {action}")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "work", "ps-0.log")))

    def test_kill_restart_of_a_rank_regroups(self) -> None:
        # A custom rule restarts the capped rank on the spare node: the others
        # form the process group again with its next incarnation and go on.
        manifest = os.path.join(self.dir, "job.yaml")
        with open(manifest, "w") as f:
            f.write(job_yaml(24576).replace("    name: antdt-nd\n", """    name: custom
    minSavingRatio: 0
    rules:
      - signal: score
        threshold: 1.5
        windows: 2
        action: KILL_RESTART
        budget: 1
"""))
        report, work = os.path.join(self.dir, "report"), os.path.join(self.dir, "work")
        run = self.run_job(manifest, report, work)
        out = run.stdout
        self.assertEqual(run.returncode, 0, out + logs_tail(work))
        self.assertIn("RESULT: every record committed exactly once", out)
        with open(os.path.join(report, "report.json")) as f:
            r = json.load(f)
        restarts = [a for a in r["actions"] if a["action"] == "KILL_RESTART"]
        self.assertEqual([a["worker"] for a in restarts], ["worker-1"], r["actions"])
        self.assertIn("spare-0", restarts[0]["description"])
        logs = {}
        for rank in range(3):
            with open(os.path.join(work, f"worker-{rank}.log"), errors="replace") as f:
                logs[rank] = f.read()
        for rank in (0, 2):  # the survivors formed the group again, once
            self.assertIn("regroups=1", logs[rank], logs[rank][-2000:])
        self.assertIn("regroups=0", logs[1], "the new incarnation finished")
        after = [p for p in r["timeline"] if p["worker"] == "worker-1"
                 and p["t"] > restarts[0]["at_seconds"] + 4]
        self.assertNotIn("CPU_THROTTLING", {p["cause"] for p in after},
                         "uncapped on the spare node")


if __name__ == "__main__":
    unittest.main()
