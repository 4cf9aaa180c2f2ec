"""The ranks' process group, formed again when a rank dies or is restarted.

A KILL_RESTART (or a crash) of one rank breaks a ``torch.distributed`` process
group: the other ranks' next collective fails. :class:`ElasticGroup` forms the
default process group over a ``TCPStore`` at ``MASTER_ADDR:MASTER_PORT``
(hosted by rank 0, as with Kubeflow's PyTorchJob) and forms it again, with the
same ranks and world size, when the restarted rank comes back: the survivors
keep their processes, their model and their data; only the group is new.

Formation rounds: every member joins round ``r`` (the store's ``round`` key) by
incrementing ``round<r>/joined``; the round forms when the count reaches the
world size, over the store prefix ``round<r>/pg``. A member that finds the
count already past the world size knows round ``r`` formed without it (it is a
restarted rank, or a survivor of a failure) and moves everyone to ``r + 1``.
When rank 0 itself died, its store died with it: the others reconnect to the
store its next incarnation hosts (a fresh one, starting again at round 0).
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Optional

import torch.distributed as dist

from antdt import _env

__all__ = ["ElasticGroup", "GroupError"]

_log = logging.getLogger(__name__)


class GroupError(RuntimeError):
    """The group could not be formed in time."""


class ElasticGroup:
    """The default process group of ``world_size`` ranks, re-formable.

    Args:
        rank, world_size: this rank and the number of ranks (fixed).
        master_addr, master_port: where rank 0 hosts the store.
        backend: ``gloo`` (CPU) or ``nccl``.
        timeout_s: how long a formation may wait for the ranks.
        collective_timeout_s: how long a collective may wait for a peer; a
            survivor blocked on a live peer that left a failed collective
            fails after it at the latest, and joins the next formation.
    """

    def __init__(self, rank: int, world_size: int, master_addr: str, master_port: int,
                 backend: str = "gloo", timeout_s: float = 120.0,
                 collective_timeout_s: float = 30.0) -> None:
        if world_size < 1:
            raise ValueError(f"world_size ($WORLD_SIZE): must be >= 1, got {world_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank ($RANK): must be in [0, {world_size}), got {rank}")
        self.rank = rank
        self.world_size = world_size
        self.master_addr = master_addr
        self.master_port = master_port
        self.backend = backend
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.collective_timeout = datetime.timedelta(seconds=collective_timeout_s)
        self.formations = 0  #: groups formed by this process
        self.round = -1  #: the round of the current group
        self._store: Optional[dist.TCPStore] = None

    @classmethod
    def from_env(cls, backend: str = "gloo", timeout_s: float = 120.0) -> "ElasticGroup":
        """From ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``."""
        return cls(_env.count("RANK", -1), _env.count("WORLD_SIZE", 0),
                   _env.required("MASTER_ADDR"), _env.count("MASTER_PORT", 29500),
                   backend=backend, timeout_s=timeout_s)

    # -- forming ------------------------------------------------------------

    def form(self) -> None:
        """Forms the default process group (again, after a failure)."""
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception as e:  # a broken group may not shut down cleanly
                _log.debug("destroying the broken group: %s", e)
        deadline = time.monotonic() + self.timeout.total_seconds()
        while True:
            try:
                store = self._connect(deadline)
                r = self._join(store, deadline)
                dist.init_process_group(
                    self.backend, store=dist.PrefixStore(f"round{r}/pg", store),
                    rank=self.rank, world_size=self.world_size,
                    timeout=self.collective_timeout)
                self.round = r
                self.formations += 1
                _log.info("rank %d: group formed (round %d, formation %d)", self.rank, r,
                          self.formations)
                return
            except GroupError:
                raise
            except (RuntimeError, OSError) as e:  # the store went away (rank 0 restarted)
                if time.monotonic() > deadline:
                    raise GroupError(f"rank {self.rank}: no group after "
                                     f"{self.timeout.total_seconds():g} s: {e}") from e
                _log.info("rank %d: forming again: %s", self.rank, e)
                if self.rank != 0:  # reconnect (to rank 0's next store, if it restarted)
                    self._store = None
                # Rank 0 keeps its store: the others' rounds live there.
                time.sleep(0.2)

    def _connect(self, deadline: float) -> dist.TCPStore:
        if self._store is not None:
            return self._store
        logged = 0.0
        while True:
            try:
                self._store = dist.TCPStore(
                    self.master_addr, self.master_port, None, self.rank == 0,
                    timeout=datetime.timedelta(seconds=10), wait_for_workers=False)
                return self._store
            except (RuntimeError, OSError) as e:  # torch raises TimeoutError too
                what = "cannot host" if self.rank == 0 else "cannot reach"
                if time.monotonic() > deadline:
                    raise GroupError(f"rank {self.rank}: {what} the store at "
                                     f"{self.master_addr}:{self.master_port}: {e}") from e
                if time.monotonic() - logged > 5:  # say why it waits, every 5 s
                    logged = time.monotonic()
                    _log.warning("rank %d: %s the store at %s:%d yet: %s", self.rank, what,
                                 self.master_addr, self.master_port, str(e).splitlines()[0])
                time.sleep(0.2)

    def _join(self, store: dist.TCPStore, deadline: float) -> int:
        """Joins the current round (moving on past formed ones); its number."""
        while True:
            r = store.add("round", 0)
            n = store.add(f"round{r}/joined", 1)
            if n <= self.world_size:
                break
            # Round r formed without this rank: everyone meets in r + 1.
            store.compare_set("round", str(r), str(r + 1))
        key = f"round{r}/joined"
        while store.add(key, 0) < self.world_size:
            if time.monotonic() > deadline:
                raise GroupError(f"rank {self.rank}: round {r}: {store.add(key, 0)} of "
                                 f"{self.world_size} ranks after "
                                 f"{self.timeout.total_seconds():g} s")
            time.sleep(0.05)
        return r

    # -- leaving ------------------------------------------------------------

    def finish(self, wait_s: float = 30.0) -> None:
        """Leaves after the last step. Rank 0 hosts the store: it waits (up to
        ``wait_s``) until every rank is done with it."""
        try:
            if self._store is not None:
                self._store.add(f"round{self.round}/finished", 1)
                if self.rank == 0:
                    deadline = time.monotonic() + wait_s
                    while (self._store.add(f"round{self.round}/finished", 0) < self.world_size
                           and time.monotonic() < deadline):
                        time.sleep(0.05)
        except (RuntimeError, OSError) as e:
            _log.debug("finish: %s", e)
        if dist.is_initialized():
            dist.destroy_process_group()
        self._store = None
