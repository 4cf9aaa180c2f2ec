"""A worker's journal of the records the sharding service acknowledged.

The same format as the C++ demo trainer's (``workload/demo/journal.h``), so the
local runner and the end-to-end tests check exactly-once for PyTorch workers
from their own journals, never from the service's counters:

- before each commit call ``P <kind> <token> <done> <epoch> <ids...>`` (kind
  ``R``: ReportProgress, ``C``: CompleteShard);
- after the answer ``A <token> <done>`` (acknowledged) or ``X <token> <done>``
  (refused: the lease was lost, the records go to another worker).

One ``write(2)`` per line on an ``O_APPEND`` descriptor, so a SIGKILL never
tears a line. A worker killed between the two lines resolves its last ``P``
line on restart (:meth:`Journal.open_and_resolve`) by repeating the call, which
the service answers idempotently for the same lease.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Iterable, List, Optional

from antdt.sharding import LeaseLostError, Shard, ShardingClient, ShardingError

__all__ = ["Journal", "PendingCall"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PendingCall:
    """A commit call journaled as sent, with no answer journaled after it."""

    kind: str  #: "R" (ReportProgress) or "C" (CompleteShard)
    token: int
    done: int


class Journal:
    """An open journal; ``None`` path: a journal that writes nothing."""

    def __init__(self, path: Optional[str]) -> None:
        self.path = path
        self._fd = -1
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def pending(self, kind: str, token: int, done: int, epoch: int, ids: Iterable[int]) -> None:
        self._line(" ".join(["P", kind, str(token), str(done), str(epoch), *map(str, ids)]))

    def acked(self, token: int, done: int) -> None:
        self._line(f"A {token} {done}")

    def refused(self, token: int, done: int) -> None:
        self._line(f"X {token} {done}")

    def _line(self, text: str) -> None:
        if self._fd < 0:
            return
        data = (text + "\n").encode()
        while data:
            written = os.write(self._fd, data)
            data = data[written:]

    @staticmethod
    def unresolved(path: Optional[str]) -> List[PendingCall]:
        """The last ``P`` line when no answer follows it (the process died there)."""
        if not path or not os.path.exists(path):
            return []
        last: Optional[PendingCall] = None
        with open(path) as f:
            for line in f:
                parts = line.split()
                if not parts:
                    continue
                if parts[0] == "P" and len(parts) >= 4:
                    last = PendingCall(parts[1], int(parts[2]), int(parts[3]))
                elif parts[0] in ("A", "X"):
                    last = None
        return [last] if last is not None else []

    @classmethod
    def open_and_resolve(cls, path: Optional[str], client: ShardingClient) -> "Journal":
        """Opens the journal of a (re)starting worker and resolves a commit its
        previous process left unanswered. Call it before acquiring shards:
        acquiring under a new incarnation releases the old leases."""
        calls = cls.unresolved(path)
        journal = cls(path)
        for call in calls:
            shard = Shard(epoch=0, index=0, token=call.token, committed=0, size=call.done,
                          start=0, end=0, record_ids=[])
            try:
                if call.kind == "C":
                    client.complete(shard)
                else:
                    client.report(shard, call.done)
                journal.acked(call.token, call.done)
                _log.info("resolved pending commit: lease %d, %d records: acknowledged",
                          call.token, call.done)
            except LeaseLostError:
                journal.refused(call.token, call.done)
                _log.info("resolved pending commit: lease %d: refused (lease lost)", call.token)
            except ShardingError as e:
                if e.code.name != "NOT_FOUND":
                    raise
                journal.refused(call.token, call.done)
        return journal
