"""A PyTorch job run by hand for the tests: a real sharding service with its
dataset, and one process per rank with the environment `antdt run` gives them.
Shared by the antdt.torch tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from typing import Dict, List, Optional

from antdt.sharding import ShardingClient
from server_process import ServerProcess

PYTHON = "/usr/bin/python3"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TorchJob:
    """``world`` ranks of ``script`` over a dataset of ``records`` records."""

    def __init__(self, workdir: str, script: str, world: int, records: int, shard_size: int,
                 epochs: int = 1, global_batch: int = 32, extra_env: Optional[Dict[str, str]] = None,
                 lease_ttl: str = "5s") -> None:
        self.workdir = workdir
        self.script = script
        self.world = world
        self.records = records
        self.epochs = epochs
        self.global_batch = global_batch
        self.extra_env = dict(extra_env or {})
        self.port = free_port()
        self.service = ServerProcess("antdt-sharding-service", workdir)
        lines = self.service.spawn(["--listen", "127.0.0.1:0", "--state-dir",
                                    os.path.join(workdir, "state"), "--lease-ttl", lease_ttl, "--auth", "none"])
        self.address = lines[0]
        with ShardingClient(self.address, "job", "train", "test-driver") as c:
            c.create_dataset(record_count=records, shard_size=shard_size, epochs=epochs)
        self.procs: Dict[int, subprocess.Popen] = {}
        self.incarnations: Dict[int, int] = {}

    def journal(self, rank: int) -> str:
        return os.path.join(self.workdir, f"worker-{rank}.journal")

    def env(self, rank: int, rank_env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        env = dict(os.environ)
        env.update({
            "ANTDT_SHARDING_ADDR": self.address, "ANTDT_JOB": "job", "ANTDT_DATASET": "train",
            "ANTDT_WORKER_ID": f"worker-{rank}",
            "ANTDT_INCARNATION": str(self.incarnations.get(rank, 0)),
            "ANTDT_LOCAL_BATCH": str(self.global_batch // self.world),
            "ANTDT_GLOBAL_BATCH": str(self.global_batch),
            "ANTDT_RECORDS": str(self.records), "ANTDT_EPOCHS": str(self.epochs),
            "ANTDT_JOURNAL": self.journal(rank),
            "ANTDT_LOSS_LOG": os.path.join(self.workdir, f"worker-{rank}.loss.jsonl"),
            "ANTDT_CHECKPOINT_PATH": os.path.join(self.workdir, "checkpoint"),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(self.port),
            "RANK": str(rank), "WORLD_SIZE": str(self.world), "LOCAL_RANK": "0",
            "OMP_NUM_THREADS": "1", "TEST_WORKDIR": self.workdir,
        })
        env["PYTHONPATH"] = python_path()
        env.pop("ANTDT_AGENT_ADDR", None)
        env.pop("ANTDT_AGENT_ADDRESS", None)
        env.update(self.extra_env)
        env.update(rank_env or {})
        return env

    def start(self, rank: int, rank_env: Optional[Dict[str, str]] = None) -> None:
        log = open(os.path.join(self.workdir, f"worker-{rank}.log"), "ab")
        self.procs[rank] = subprocess.Popen([PYTHON, self.script], env=self.env(rank, rank_env),
                                            stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=self.workdir)
        log.close()

    def start_all(self, rank_env: Optional[Dict[int, Dict[str, str]]] = None) -> None:
        for rank in range(self.world):
            self.start(rank, (rank_env or {}).get(rank))

    def kill(self, rank: int) -> None:
        """SIGKILLs the rank (a crash or a KILL_RESTART) and reaps it."""
        self.procs[rank].send_signal(signal.SIGKILL)
        self.procs[rank].wait(timeout=30)

    def restart(self, rank: int) -> None:
        """Starts the rank's next incarnation, as the runner does."""
        self.incarnations[rank] = self.incarnations.get(rank, 0) + 1
        self.start(rank)

    def wait(self, timeout_s: float) -> List[int]:
        deadline = time.monotonic() + timeout_s
        codes = []
        for rank, proc in sorted(self.procs.items()):
            try:
                codes.append(proc.wait(timeout=max(deadline - time.monotonic(), 0.1)))
            except subprocess.TimeoutExpired:
                codes.append(None)
        return codes

    def log(self, rank: int) -> str:
        try:
            with open(os.path.join(self.workdir, f"worker-{rank}.log"), errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        self.service.stop()


def verify_journals(paths: List[str], records: int, epochs: int) -> Dict[str, int]:
    """Reads the ranks' journals: missing and twice-committed records per epoch,
    as the C++ demo::VerifyJournals counts them."""
    count = [[0] * records for _ in range(epochs)]
    per_journal = {}
    for path in paths:
        pending = {}
        mine = 0
        with open(path) as f:
            for line in f:
                parts = line.split()
                if not parts:
                    continue
                if parts[0] == "P":
                    pending[int(parts[2])] = (int(parts[4]), [int(x) for x in parts[5:]])
                elif parts[0] == "A" and int(parts[1]) in pending:
                    epoch, ids = pending.pop(int(parts[1]))
                    for i in ids:
                        count[epoch][i] += 1
                    mine += len(ids)
                elif parts[0] == "X":
                    pending.pop(int(parts[1]), None)
        per_journal[os.path.basename(path)] = mine
    return {
        "missing": sum(1 for e in count for c in e if c == 0),
        "twice": sum(1 for e in count for c in e if c > 1),
        "committed": sum(sum(e) for e in count),
        **{f"by:{k}": v for k, v in per_journal.items()},
    }


def python_path() -> str:
    """This process's PYTHONPATH with absolute entries (ranks run elsewhere)."""
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    return os.pathsep.join(os.path.abspath(p) for p in entries if p)
