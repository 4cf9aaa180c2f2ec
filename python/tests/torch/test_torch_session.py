"""antdt.torch against a real sharding service and real DDP ranks (gloo on
loopback): the weighting is exact, directives apply at one step boundary, and
a SIGKILLed rank's group forms again with every record committed exactly once.

Needs Debian's python3-torch (run with /usr/bin/python3), ANTDT_BIN_DIR and
the build tree's package on PYTHONPATH; ctest's python_torch_test sets them.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import tempfile
import time
import unittest
from typing import Dict, List

try:
    import torch
except ImportError:  # pragma: no cover - the test needs Debian's python3-torch
    torch = None

from torch_job import TorchJob, verify_journals

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torch_weighting_worker.py")
EXAMPLE = os.path.join(HERE, "..", "..", "..", "examples", "pytorch", "train.py")


def count_lines(path: str) -> int:
    with open(path) as f:
        return sum(1 for _ in f)


def read_traces(workdir: str, world: int) -> Dict[int, List[int]]:
    """Step number -> the record ids every rank trained on in it."""
    steps: Dict[int, List[int]] = collections.defaultdict(list)
    for rank in range(world):
        with open(os.path.join(workdir, f"trace-{rank}.jsonl")) as f:
            for line in f:
                row = json.loads(line)
                steps[row["step"]].extend(row["ids"])
    return steps


def reference(steps: Dict[int, List[int]], lr: float = 0.5) -> Dict[str, "torch.Tensor"]:
    """One process, the same model, each step the mean loss over the records
    every rank trained on in that step."""
    from torch_weighting_worker import FEATURES, sample

    torch.manual_seed(0)
    net = torch.nn.Linear(FEATURES, 1).to(torch.float64)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for number in sorted(steps):
        ids = steps[number]
        if not ids:
            continue  # every rank filled in: zero gradients
        batch = [sample(i) for i in ids]
        x = torch.stack([b[1] for b in batch])
        y = torch.stack([b[2] for b in batch])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(net(x).squeeze(1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net.state_dict()


def assert_global_batch_kept(test: unittest.TestCase, steps: Dict[int, List[int]], batch: int,
                             world: int) -> None:
    """Every step trains the global batch until the data runs out; then at
    most one short step per rank (each rank's last records)."""
    sizes = [len(steps[n]) for n in sorted(steps)]
    short = [i for i, s in enumerate(sizes) if s != batch]
    test.assertTrue(short == list(range(len(sizes) - len(short), len(sizes))), sizes)
    test.assertLessEqual(len(short), world, sizes)


@unittest.skipIf(torch is None, "needs Debian's python3-torch (/usr/bin/python3)")
class WeightingTest(unittest.TestCase):
    """After one epoch the DDP ranks' model equals a single-process model
    trained on the same global batches, whatever the split of each batch."""

    def setUp(self) -> None:
        self.workdir = tempfile.mkdtemp(prefix="antdt-torch-")

    def tearDown(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    def run_job(self, world: int, rank_env: Dict[int, Dict[str, str]] = None,
                extra_env: Dict[str, str] = None, records: int = 640) -> None:
        job = TorchJob(self.workdir, WORKER, world=world, records=records, shard_size=40,
                       global_batch=32, extra_env=extra_env)
        try:
            job.start_all(rank_env)
            codes = job.wait(180)
            self.assertEqual(codes, [0] * world,
                             "\n".join(job.log(r) for r in range(world)))
            check = verify_journals([job.journal(r) for r in range(world)], records, 1)
            self.assertEqual((check["missing"], check["twice"]), (0, 0), check)
        finally:
            job.stop()
        steps = read_traces(self.workdir, world)
        self.assertEqual(sorted(i for ids in steps.values() for i in ids), list(range(records)),
                         "every record trained once in a run without failures")
        got = torch.load(os.path.join(self.workdir, "final.pt"))
        want = reference(steps)
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-10,
                                       msg=f"parameter {name}")
        return steps

    def test_equal_batches(self) -> None:
        steps = self.run_job(2)
        self.assertGreaterEqual(len(steps), 640 // 32)

    def test_adjusted_batches_keep_the_global_batch(self) -> None:
        # As ADJUST_BS: rank 0 takes 24 of the 32 records of a step, rank 1 8.
        steps = self.run_job(2, {0: {"TEST_PROPOSE": "3:24:1"}, 1: {"TEST_PROPOSE": "3:8:1"}})
        assert_global_batch_kept(self, steps, 32, world=2)
        with open(os.path.join(self.workdir, "trace-0.jsonl")) as f:
            rank0 = [len(json.loads(line)["ids"]) for line in f]
        # Proposed during step 3, exchanged in step 4's collective, applied
        # by both ranks from step 5 on.
        self.assertEqual(rank0[:5], [16] * 5)
        self.assertEqual(rank0[5], 24, "applied at one step boundary, on both ranks")

    def test_accumulation_steps(self) -> None:
        # As AntDT-DD: rank 0 two micro-batches of 12, rank 1 one of 8.
        steps = self.run_job(2, {0: {"TEST_PROPOSE": "2:12:2"}, 1: {"TEST_PROPOSE": "2:8:1"}})
        assert_global_batch_kept(self, steps, 32, world=2)
        with open(os.path.join(self.workdir, "trace-0.jsonl")) as f:
            micro = [json.loads(line)["micro"] for line in f]
        self.assertEqual(micro[:4], [1] * 4)
        self.assertEqual(micro[4], 2, "two micro-batches from step 4 on")

    def test_a_partial_plan_waits_then_applies(self) -> None:
        # Only rank 0 hears of a change: the global batch is not kept, so the
        # ranks wait directive_patience (20) steps, then apply it together.
        steps = self.run_job(2, {0: {"TEST_PROPOSE": "1:20:1"}}, records=1200)
        sizes = [len(steps[n]) for n in sorted(steps)]
        # Proposed in step 1, first exchanged in step 2: decisions 2..21 wait
        # (20 steps), the change applies from step 22 on both ranks.
        self.assertEqual(sizes[:22], [32] * 22, sizes)
        self.assertEqual(sizes[22], 36, sizes)

    def test_dataloader_worker_processes(self) -> None:
        self.run_job(2, extra_env={"TEST_LOADER_WORKERS": "2"})


@unittest.skipIf(torch is None, "needs Debian's python3-torch (/usr/bin/python3)")
class RestartTest(unittest.TestCase):
    """A rank SIGKILLed mid-epoch: the group forms again with its next
    incarnation and every record is committed exactly once (the journals)."""

    def setUp(self) -> None:
        self.workdir = tempfile.mkdtemp(prefix="antdt-torch-kill-")

    def tearDown(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    def kill_and_restart(self, victim: int) -> None:
        # The example's model (a 280,000-parameter MLP): its gradient
        # allreduce is split in chunks, so a survivor can be blocked on a live
        # peer when the victim dies; the group must still form again at once.
        world, records = 3, 12288
        job = TorchJob(self.workdir, EXAMPLE, world=world, records=records, shard_size=256,
                       global_batch=96, lease_ttl="3s")
        loss_log = os.path.join(self.workdir, "worker-0.loss.jsonl")
        try:
            job.start_all()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if os.path.exists(loss_log) and count_lines(loss_log) >= 20:
                    break
                time.sleep(0.01)
            job.kill(victim)
            killed = time.monotonic()
            job.restart(victim)
            codes = job.wait(240)
            logs = {r: job.log(r) for r in range(world)}
            self.assertEqual(codes, [0] * world, "\n".join(logs.values()))
            finished = time.monotonic() - killed
            check = verify_journals([job.journal(r) for r in range(world)], records, 1)
            self.assertEqual((check["missing"], check["twice"]), (0, 0), check)
            self.assertEqual(check["committed"], records)
            regroups = {r: [int(n) for n in re.findall(r"regroups=(\d+)", logs[r])]
                        for r in range(world)}
            for rank in range(world):  # the survivors formed the group again once
                self.assertEqual(regroups[rank][-1:], [0 if rank == victim else 1], logs[rank])
            print(f"\nrank {victim} killed: the job finished {finished:.1f} s later; {check}",
                  flush=True)
        finally:
            job.stop()

    def test_checkpoints_agree_with_the_commits_and_restore(self) -> None:
        # Every rank killed at once (a node pool lost): the next incarnations
        # restore the model of the last checkpoint, which was saved right
        # after its step's records were committed.
        world, records = 2, 4000
        job = TorchJob(self.workdir, WORKER, world=world, records=records, shard_size=50,
                       global_batch=32, lease_ttl="3s", extra_env={"TEST_CHECKPOINT_EVERY": "10"})
        path = os.path.join(self.workdir, "checkpoint", "model.pt")
        try:
            job.start_all()
            deadline = time.monotonic() + 60
            while not os.path.exists(path) or torch.load(path)["step"] < 30:
                self.assertLess(time.monotonic(), deadline, job.log(0))
                time.sleep(0.05)
            saved = torch.load(path)
            self.assertEqual(saved["step"] % 10, 0)
            self.assertEqual(saved["committed"], saved["step"] * 32,
                             "the checkpoint's model trained on exactly the records committed")
            for rank in range(world):
                job.kill(rank)
            restored = torch.load(path)["step"]
            for rank in range(world):
                job.restart(rank)
            self.assertEqual(job.wait(240), [0] * world, job.log(0) + job.log(1))
            check = verify_journals([job.journal(r) for r in range(world)], records, 1)
            self.assertEqual((check["missing"], check["twice"]), (0, 0), check)
            with open(os.path.join(self.workdir, "trace-0.jsonl")) as f:
                rows = [json.loads(line) for line in f]
            second = [r["step"] for r in rows if r["incarnation"] == 1]
            self.assertEqual(second[0], restored, "the second incarnation went on from the "
                             "checkpoint's step")
        finally:
            job.stop()

    def test_a_rank_restarted_after_the_data_is_done_exits_at_once(self) -> None:
        # A rank that failed on its way out (after its last commit), or was
        # restarted as the others trained the last records: its next
        # incarnation has no group to join and must not wait for one (the
        # group's timeout is 120 s) nor fail, or it would be restarted again.
        world, records = 2, 2048
        job = TorchJob(self.workdir, EXAMPLE, world=world, records=records, shard_size=256,
                       global_batch=64, lease_ttl="3s")
        try:
            job.start_all()
            self.assertEqual(job.wait(120), [0] * world, job.log(0) + job.log(1))
            eval_path = os.path.join(self.workdir, "worker-0.loss.jsonl.eval.json")
            with open(eval_path) as f:
                evaluated = f.read()
            for rank in range(world):  # each alone: no peer to form a group with
                job.restart(rank)
                self.assertEqual(job.wait(60), [0] * world, job.log(0) + job.log(1))
                self.assertIn("the dataset is finished: nothing to train", job.log(rank))
            with open(eval_path) as f:
                self.assertEqual(f.read(), evaluated, "an idle incarnation evaluates nothing")
            check = verify_journals([job.journal(r) for r in range(world)], records, 1)
            self.assertEqual((check["missing"], check["twice"]), (0, 0), check)
        finally:
            job.stop()

    def test_kill_a_rank(self) -> None:
        self.kill_and_restart(1)

    def test_kill_the_rank_that_hosts_the_store(self) -> None:
        self.kill_and_restart(0)


if __name__ == "__main__":
    unittest.main()
