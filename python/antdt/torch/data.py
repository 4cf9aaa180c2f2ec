"""Records from AntDT's dynamic data sharding service as a PyTorch dataset.

:class:`ShardedDataset` is an ``IterableDataset``: in the process that iterates
it (the training process, or each ``DataLoader`` worker process) it leases
shards from the sharding service and yields one :class:`Record` per record of
each shard, in the shard's order. It never commits anything: records count as
consumed only once the step that trained on them is over, and the training
process commits them then (:class:`StepCommits`), by the shard's lease token.
So a ``DataLoader`` that prefetches, or whose workers run ahead, commits
nothing early; a rank that dies loses only uncommitted records, which the
service hands out again (after the last committed record of each shard).

The iterator never blocks the training loop on the service: while every
remaining shard is leased to other ranks (the service answers WAIT) it yields
:data:`WAIT` after a short sleep, so a step is assembled from what there is and
the ranks' per-step collective goes on. Iteration ends at END_OF_DATA (every
epoch committed).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, Dict, Iterator, List, Union

import torch.utils.data

from antdt.sharding import LeaseLostError, Shard, ShardingClient, ShardingError, Wait
from antdt.torch.journal import Journal

__all__ = ["ClientSpec", "Record", "ShardedDataset", "StepCommits", "WAIT"]

_log = logging.getLogger(__name__)


class _Wait:
    """No record now: every remaining shard is leased to another rank."""

    def __repr__(self) -> str:
        return "WAIT"

    def __reduce__(self) -> str:
        return "WAIT"  # unpickled (from a DataLoader worker) as the one WAIT


#: Yielded while no shard is free; the data may come back (another rank's lease
#: may expire) until the iterator ends.
WAIT = _Wait()


@dataclasses.dataclass(frozen=True)
class ClientSpec:
    """What a process needs to open its own :class:`ShardingClient` (picklable,
    so ``DataLoader`` worker processes open theirs)."""

    address: str
    job: str
    dataset: str
    worker_id: str
    incarnation: int = 0
    retry_budget_s: float = 60.0

    def open(self) -> ShardingClient:
        return ShardingClient(self.address, self.job, self.dataset, self.worker_id,
                              incarnation=self.incarnation, retry_budget_s=self.retry_budget_s)


@dataclasses.dataclass(frozen=True)
class Record:
    """One record of a leased shard, and where it sits in the shard."""

    record_id: int
    epoch: int
    token: int  #: the lease that covers it
    position: int  #: its position in the shard, counted from the shard's first record
    shard_size: int
    sample: Any = None  #: ``sample_fn(record_id)``


class ShardedDataset(torch.utils.data.IterableDataset):
    """The records of one AntDT dataset, for one rank.

    Args:
        client: how to reach the service as this rank (``worker_id`` and
            ``incarnation`` are the rank's own).
        sample_fn: ``record_id -> sample``; runs in the process iterating
            (a DataLoader worker), so put decoding and augmentation here.
        wait_s: how long to sleep on WAIT before yielding :data:`WAIT`
            (the service's ``retry_after_ms`` when it is shorter).
    """

    def __init__(self, client: ClientSpec, sample_fn: Callable[[int], Any],
                 wait_s: float = 0.05) -> None:
        super().__init__()
        self.client = client
        self.sample_fn = sample_fn
        self.wait_s = wait_s

    def __iter__(self) -> Iterator[Union[Record, _Wait]]:
        client = self.client.open()
        try:
            while True:
                shard = client.try_acquire()
                if shard is None:
                    return
                if isinstance(shard, Wait):
                    time.sleep(min(self.wait_s, shard.retry_after_s))
                    yield WAIT
                    continue
                for i, record_id in enumerate(shard.record_ids):
                    yield Record(record_id, shard.epoch, shard.token, shard.committed + i,
                                 shard.size, self.sample_fn(record_id))
        finally:
            client.close()


@dataclasses.dataclass
class _Lease:
    """The training process's view of one leased shard."""

    epoch: int
    size: int
    acked: int  #: records of the shard the service has acknowledged
    trained: int  #: records of the shard trained on (a prefix: records arrive in order)
    ids: Dict[int, int] = dataclasses.field(default_factory=dict)  #: position -> record id
    lost: bool = False


class StepCommits:
    """Commits the records of finished steps, shard by shard, and journals them.

    Call :meth:`trained` for every record of a step once the optimizer step
    that used it is done, then :meth:`commit`: each touched shard reports its
    trained prefix (ReportProgress, which also renews the lease) or completes
    (CompleteShard). A lease found lost is dropped; its records go back to the
    queue and are trained again by some rank (they were never committed).
    """

    def __init__(self, client: ShardingClient, journal: Journal) -> None:
        self.client = client
        self.journal = journal
        self.committed = 0  #: records acknowledged through this object
        self.refused = 0  #: commit calls refused (leases lost)
        self._leases: Dict[int, _Lease] = {}
        self._touched: List[int] = []

    def trained(self, record: Record) -> None:
        lease = self._leases.get(record.token)
        if lease is None:
            start = record.position
            lease = _Lease(record.epoch, record.shard_size, acked=start, trained=start)
            self._leases[record.token] = lease
        lease.ids[record.position] = record.record_id
        if record.position + 1 > lease.trained:
            lease.trained = record.position + 1
        if record.token not in self._touched:
            self._touched.append(record.token)

    def commit(self) -> int:
        """Commits every shard touched since the last call; returns the records
        newly acknowledged."""
        newly = 0
        for token in self._touched:
            lease = self._leases[token]
            if lease.lost or lease.trained <= lease.acked:
                continue
            newly += self._commit_lease(token, lease)
        self._touched = []
        return newly

    def _commit_lease(self, token: int, lease: _Lease) -> int:
        done = lease.trained
        complete = done >= lease.size
        ids = [lease.ids[p] for p in range(lease.acked, done)]
        self.journal.pending("C" if complete else "R", token, done, lease.epoch, ids)
        shard = Shard(epoch=lease.epoch, index=0, token=token, committed=lease.acked,
                      size=lease.size, start=0, end=0, record_ids=ids, acked=lease.acked)
        try:
            if complete:
                self.client.complete(shard)
            else:
                self.client.report(shard, done)
        except LeaseLostError as e:
            self.journal.refused(token, done)
            self.refused += 1
            lease.lost = True
            _log.warning("lease %d lost before %d records were committed: %s", token,
                         done - lease.acked, e.message)
            return 0
        except ShardingError:
            raise
        self.journal.acked(token, done)
        newly = done - lease.acked
        for p in range(lease.acked, done):
            lease.ids.pop(p, None)
        lease.acked = done
        self.committed += newly
        if complete:
            del self._leases[token]
        return newly
