"""Client of the AntDT dynamic data sharding service (``antdt.v1.ShardingService``).

A worker acquires shards of a dataset under a lease, reports record-level
progress inside a shard and completes it; the service hands every record of an
epoch to exactly one committed report. A record only counts as consumed once
the service acknowledged it: :class:`ShardingClient` calls ``on_commit(epoch,
record_ids)`` after each acknowledged ``ReportProgress``/``CompleteShard`` with
exactly the record ids that call newly committed.

Every call retries ``UNAVAILABLE``, ``DEADLINE_EXCEEDED`` and ``CANCELLED``
(the service is restarting, or the network hiccupped; a service stopping
gracefully cancels the calls it has not started, and this client never
cancels its own) with jittered exponential backoff from
50 ms up to 2 s, for at most ``retry_budget_s`` seconds; any other failure
raises :class:`ShardingError`. Retried calls are safe: reports are idempotent
and a shard whose acquisition answer was lost goes back to the queue when its
lease expires.

Example::

    client = ShardingClient("127.0.0.1:7070", "job", "train", "worker-0",
                            on_commit=lambda epoch, ids: ...)
    client.create_dataset(record_count=1_000_000, shard_size=1000, epochs=2)
    for shard, record_id in client.records(commit_every=100):
        train_on(record_id)

A worker started by the operator or the local runner finds its service, job,
dataset, id and incarnation in its environment: ``ShardingClient.from_env()``.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import grpc

from antdt import _env
from antdt.v1 import sharding_pb2 as pb
from antdt.v1 import sharding_pb2_grpc as pb_grpc

__all__ = [
    "ENV_DATASET",
    "ENV_INCARNATION",
    "ENV_SHARDING_ADDR",
    "FileSlice",
    "LeaseLostError",
    "OnCommit",
    "Shard",
    "ShardingClient",
    "ShardingError",
    "Wait",
]

#: The sharding service's ``HOST:PORT``.
ENV_SHARDING_ADDR = "ANTDT_SHARDING_ADDR"
#: The dataset's name (default ``"train"``).
ENV_DATASET = "ANTDT_DATASET"
#: The worker's incarnation, an integer >= 0 (default 0).
ENV_INCARNATION = "ANTDT_INCARNATION"

_log = logging.getLogger(__name__)

#: ``on_commit(epoch, record_ids)``: called after the service acknowledged
#: ``record_ids`` (in processing order) as committed in ``epoch``.
OnCommit = Callable[[int, List[int]], None]

_RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                        grpc.StatusCode.CANCELLED})
_BACKOFF_INITIAL_S = 0.05
_BACKOFF_MAX_S = 2.0
_DEFAULT_WAIT_S = 0.2


class ShardingError(Exception):
    """A sharding call failed with a non-retryable status, or ran out of retries."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class LeaseLostError(ShardingError):
    """The shard's lease is no longer held (expired, released or fenced).

    The records acknowledged before stay committed; the rest of the shard went
    back to the queue and will be handed out again.
    """


@dataclass(frozen=True)
class Wait:
    """The service's WAIT: every remaining shard is leased to other workers;
    ask again after ``retry_after_s``."""

    retry_after_s: float


@dataclass(frozen=True)
class FileSlice:
    """Records ``[offset, offset + count)`` of the file ``path``."""

    path: str
    offset: int
    count: int


@dataclass
class Shard:
    """A leased shard: the records still to do and the lease that covers them."""

    epoch: int
    index: int  #: shard index within the epoch
    token: int  #: the lease's fencing token
    committed: int  #: records of the shard committed before this lease (resume point)
    size: int  #: records in the whole shard
    start: int  #: unshuffled: first global record id still to do
    end: int  #: unshuffled: one past this lease's last record id
    record_ids: List[int]  #: the records still to do, in processing order
    slices: List[FileSlice] = field(default_factory=list)  #: file parts of the remainder
    lease_deadline_unix_ms: int = 0
    acked: int = 0  #: records of the shard committed so far, this lease's included
    #: records of the shard (from its first) at which this lease ends: ``size``,
    #: or fewer for a much slower worker near an epoch's end (the guided
    #: layout, ``min_shard_records``); the rest of the shard is leased apart
    #: once this lease completes
    lease_end: int = 0

    @classmethod
    def from_proto(cls, shard: pb.Shard, lease: pb.Lease) -> "Shard":
        if shard.record_ids:
            ids = list(shard.record_ids)
        else:
            ids = list(range(shard.start, shard.end))
        return cls(
            epoch=shard.epoch,
            index=shard.index,
            token=lease.token,
            committed=shard.committed,
            size=shard.size,
            start=shard.start,
            end=shard.end,
            record_ids=ids,
            slices=[FileSlice(s.path, s.offset, s.count) for s in shard.slices],
            lease_deadline_unix_ms=lease.deadline_unix_ms,
            acked=shard.committed,
            lease_end=shard.lease_end or shard.size,
        )

    def end_at(self, end: int) -> None:
        """Ends this lease at ``end`` (counted from the shard's first record), as a
        ``ReportProgress`` answer that shortened it says: ``record_ids``,
        ``end``, ``slices`` and ``lease_end`` stop there. Ignored when ``end``
        is 0 (a service that does not say), not before ``lease_end`` or before
        what was committed."""
        if end <= 0 or end >= self.lease_end or end < max(self.acked, self.committed):
            return
        keep = end - self.committed  # records still to do, from the first
        del self.record_ids[keep:]
        self.end = min(self.end, self.start + keep)
        sliced: List[FileSlice] = []
        for part in self.slices:
            if keep <= 0:
                break
            sliced.append(part if part.count <= keep else FileSlice(part.path, part.offset, keep))
            keep -= part.count
        self.slices = sliced
        self.lease_end = end

    def _ids_between(self, done_from: int, done_to: int) -> List[int]:
        """Record ids of shard positions [done_from, done_to) (counted from the shard's start)."""
        return self.record_ids[done_from - self.committed : done_to - self.committed]


class ShardingClient:
    """One worker's client for one dataset of a job.

    Args:
        address: the service's ``HOST:PORT``.
        job, dataset: the dataset's job and name.
        worker_id: this worker's stable id.
        incarnation: raise it each time the worker restarts; the service then
            hands the older incarnation's in-flight shards back (from after
            their last committed record) and refuses the old process.
        retry_budget_s: how long one call keeps retrying UNAVAILABLE,
            DEADLINE_EXCEEDED and CANCELLED before it raises.
        on_commit: called as ``on_commit(epoch, record_ids)`` after every
            acknowledged report or completion, with the newly committed ids.
        call_timeout_s: deadline of each attempt.
        token: the job's credential, sent with every call; ``None`` reads
            ``$ANTDT_TOKEN``, else the file ``$ANTDT_TOKEN_FILE`` names (the
            operator and the local runner set one of them), else sends none.
        follow_shorter_leases: the caller takes no record of a lease beyond
            what it has reported (``records()`` does: a record counts as
            processed when the next is asked for, and it reports before it
            hands that one out) and follows the shard's ``lease_end`` after
            each :meth:`report`: under the guided layout the service may then
            end a much slower worker's lease early, so that the shard's rest
            goes to a faster worker instead of waiting at the epoch's end. Off
            (the default, for a caller that prefetches records, e.g. a data
            loader with workers of its own): leases end where acquired.
    """

    def __init__(
        self,
        address: str,
        job: str,
        dataset: str,
        worker_id: str,
        incarnation: int = 0,
        retry_budget_s: float = 60.0,
        on_commit: Optional[OnCommit] = None,
        call_timeout_s: float = 5.0,
        token: Optional[str] = None,
        follow_shorter_leases: bool = False,
    ) -> None:
        self.address = address
        self.job = job
        self.dataset = dataset
        self.worker_id = worker_id
        self.incarnation = incarnation
        self.retry_budget_s = retry_budget_s
        self.on_commit = on_commit
        self.call_timeout_s = call_timeout_s
        self.follow_shorter_leases = follow_shorter_leases
        self.leases_shortened = 0  #: reports whose answer ended the lease early (monitoring, tests)
        self.retries = 0  #: attempts retried so far (for monitoring and tests)
        # Reconnect quickly once a restarted service listens again (gRPC's
        # default reconnect backoff starts at 1 s and grows to 2 min). Not
        # grpc.min_reconnect_backoff_ms: that is the connect *timeout*.
        self._channel = _env.channel(
            address,
            options=[
                ("grpc.initial_reconnect_backoff_ms", int(_BACKOFF_INITIAL_S * 1000)),
                ("grpc.max_reconnect_backoff_ms", int(_BACKOFF_MAX_S * 1000)),
            ],
        )
        self._stub = pb_grpc.ShardingServiceStub(self._channel)
        if token is None:
            token = _env.token()
        self._metadata = (("authorization", "Bearer " + token),) if token else ()

    @classmethod
    def from_env(cls, **overrides: Any) -> "ShardingClient":
        """A client configured by the environment the operator and the local
        runner give every worker; ``overrides`` are constructor arguments that
        win over it (``on_commit=...``, ``dataset="eval"``).

        Reads ``$ANTDT_SHARDING_ADDR`` (``address``), ``$ANTDT_JOB``
        (``job``), ``$ANTDT_DATASET`` (``dataset``, default ``"train"``),
        ``$ANTDT_WORKER_ID`` (``worker_id``) and ``$ANTDT_INCARNATION``
        (``incarnation``, default 0), each only when not overridden.

        Raises:
            ValueError: a required variable is not set, or one is malformed;
                the message starts with the variable's name.
        """
        from_env = {
            "address": lambda: _env.required(ENV_SHARDING_ADDR),
            "job": lambda: _env.required(_env.JOB),
            "dataset": lambda: _env.first_set(ENV_DATASET) or "train",
            "worker_id": lambda: _env.required(_env.WORKER_ID),
            "incarnation": lambda: _env.count(ENV_INCARNATION, default=0),
        }
        settings = {name: read() for name, read in from_env.items() if name not in overrides}
        return cls(**settings, **overrides)

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """Closes the channel (does not release leases; see :meth:`release`)."""
        self._channel.close()

    def __enter__(self) -> "ShardingClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- calls -------------------------------------------------------------

    def create_dataset(
        self,
        record_count: Optional[int] = None,
        files: Optional[Sequence[Tuple[str, int]]] = None,
        *,
        shard_size: int,
        epochs: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        min_shard_records: int = 0,
        workers: int = 0,
    ) -> pb.CreateDatasetResponse:
        """Creates the dataset, or confirms that it exists with these parameters.

        Give either ``record_count`` or ``files`` as ``(path, records)`` pairs
        (records are then numbered across the files in order).
        ``min_shard_records`` and ``workers`` > 0 turn on the guided layout:
        shards shrink towards an epoch's end, down to that many records, and
        a much slower worker leases only its share there, so that no worker
        holds a large share of the end while the others wait.
        """
        spec = pb.DatasetSpec(
            job=self.job,
            name=self.dataset,
            record_count=record_count or 0,
            files=[pb.DataFile(path=p, records=n) for p, n in (files or [])],
            shard_size=shard_size,
            epochs=epochs,
            shuffle=shuffle,
            seed=seed,
            min_shard_records=min_shard_records,
            workers=workers,
        )
        return self._call("CreateDataset", pb.CreateDatasetRequest(spec=spec))

    def acquire(self, request_id: Optional[str] = None) -> Optional[Shard]:
        """Leases the next shard; None once every epoch is done.

        While every remaining shard is leased to others the service answers
        WAIT, and this sleeps its ``retry_after_ms`` and asks again.
        """
        # One request id for every ask: a retry whose first answer was lost
        # gets the same lease back.
        request_id = request_id or uuid.uuid4().hex
        while True:
            got = self.try_acquire(request_id)
            if not isinstance(got, Wait):
                return got
            time.sleep(got.retry_after_s)

    def try_acquire(self, request_id: Optional[str] = None) -> "Union[Shard, Wait, None]":
        """One ask: a leased shard, :class:`Wait` while every remaining shard
        is leased to others, or None once every epoch is done."""
        request = pb.AcquireShardRequest(
            dataset=self._ref(),
            worker_id=self.worker_id,
            incarnation=self.incarnation,
            request_id=request_id or uuid.uuid4().hex,
        )
        resp = self._call("AcquireShard", request)
        if resp.result == pb.AcquireShardResponse.SHARD:
            return Shard.from_proto(resp.shard, resp.lease)
        if resp.result == pb.AcquireShardResponse.END_OF_DATA:
            return None
        if resp.result == pb.AcquireShardResponse.WAIT:
            return Wait(resp.retry_after_ms / 1000.0 if resp.retry_after_ms > 0 else _DEFAULT_WAIT_S)
        raise ShardingError(grpc.StatusCode.UNKNOWN, f"AcquireShard: unexpected result {resp.result}")

    def report(self, shard: Shard, records_done: int) -> int:
        """Commits the shard's first ``records_done`` records (counted from the
        shard's first record, so a resumed shard starts at ``shard.committed``)
        and renews the lease. Returns the records of the shard now committed.
        With ``follow_shorter_leases`` the lease may end earlier now: the
        shard's ``lease_end`` (and ``record_ids``) say where; take no record
        past it.

        Raises :class:`LeaseLostError` when the lease is no longer held.
        """
        resp = self._call(
            "ReportProgress",
            pb.ReportProgressRequest(dataset=self._ref(), token=shard.token, records_done=records_done,
                                     follow_shorter_end=self.follow_shorter_leases),
            lease_call=True,
        )
        if resp.lease.deadline_unix_ms:
            shard.lease_deadline_unix_ms = resp.lease.deadline_unix_ms
        self._acknowledge(shard, resp.committed)
        if self.follow_shorter_leases and 0 < resp.lease_end < shard.lease_end:
            shard.end_at(resp.lease_end)
            self.leases_shortened += 1
        return resp.committed

    def complete(self, shard: Shard) -> None:
        """Commits the rest of the lease (to ``shard.lease_end``) and ends it.

        Raises :class:`LeaseLostError` when the lease is no longer held.
        """
        self._call(
            "CompleteShard",
            pb.CompleteShardRequest(dataset=self._ref(), token=shard.token),
            lease_call=True,
        )
        self._acknowledge(shard, shard.lease_end)

    def complete_and_acquire(self, shard: Shard) -> Optional[Shard]:
        """:meth:`complete`, and the next shard (None once every epoch is
        done) in the same call: one round trip per shard instead of two.
        Waits out WAIT answers like :meth:`acquire`.

        Raises :class:`LeaseLostError` when the lease is no longer held; then
        nothing was acquired.
        """
        request_id = uuid.uuid4().hex
        next_request = pb.AcquireShardRequest(
            dataset=self._ref(),
            worker_id=self.worker_id,
            incarnation=self.incarnation,
            request_id=request_id,
        )
        resp = self._call(
            "CompleteShard",
            pb.CompleteShardRequest(dataset=self._ref(), token=shard.token, next=next_request),
            lease_call=True,
        )
        self._acknowledge(shard, shard.lease_end)
        if resp.next.result == pb.AcquireShardResponse.SHARD:
            return Shard.from_proto(resp.next.shard, resp.next.lease)
        if resp.next.result == pb.AcquireShardResponse.END_OF_DATA:
            return None
        if resp.next.result == pb.AcquireShardResponse.WAIT:
            time.sleep(
                resp.next.retry_after_ms / 1000.0 if resp.next.retry_after_ms > 0 else _DEFAULT_WAIT_S
            )
        # WAIT, or unset (the shard is complete but nothing could be
        # acquired): ask on its own, which says why.
        return self.acquire(request_id)

    def release(self) -> int:
        """Gives back the shards of this worker's incarnations up to this one
        (their unfinished remainders are requeued at once); returns how many.

        The service then refuses shards to this incarnation: a client that
        goes on must use a higher one.
        """
        resp = self._call(
            "ReleaseWorker",
            pb.ReleaseWorkerRequest(
                dataset=self._ref(), worker_id=self.worker_id, incarnation=self.incarnation
            ),
        )
        return resp.released_shards

    def progress(self) -> pb.GetProgressResponse:
        """The dataset's progress: epoch, shard counts, committed records, rates."""
        return self._call("GetProgress", pb.GetProgressRequest(dataset=self._ref()))

    def records(self, commit_every: int = 100) -> Iterator[Tuple[Shard, int]]:
        """Yields ``(shard, record_id)`` over every shard until END_OF_DATA.

        A record counts as processed when the caller asks for the next one.
        Progress is reported every ``commit_every`` processed records and each
        shard is completed after its last record; only what ``on_commit``
        announces is committed. With ``follow_shorter_leases`` a shard whose
        lease a report ended early is completed there (its rest goes to
        another worker). A shard whose lease was lost is abandoned (its
        remainder is handed out again) and the loop goes on with the next.
        Leaving the loop early leaves the current lease to expire (or call
        :meth:`release`).
        """
        if commit_every <= 0:
            raise ValueError(f"commit_every: must be > 0, got {commit_every}")
        shard = self.acquire()
        while shard is not None:
            try:
                done = shard.committed
                # Up to the lease's end as it is now: a report may move it closer.
                while done < shard.lease_end and done - shard.committed < len(shard.record_ids):
                    yield shard, shard.record_ids[done - shard.committed]
                    done += 1
                    if done < shard.lease_end and done - shard.acked >= commit_every:
                        self.report(shard, done)
                # One call completes this shard and leases the next.
                shard = self.complete_and_acquire(shard)
            except LeaseLostError as e:
                _log.warning(
                    "lease %d on shard %d of epoch %d lost after %d records: %s",
                    shard.token, shard.index, shard.epoch, shard.acked, e.message,
                )
                shard = self.acquire()

    # -- internals ---------------------------------------------------------

    def _ref(self) -> pb.DatasetRef:
        return pb.DatasetRef(job=self.job, name=self.dataset)

    def _acknowledge(self, shard: Shard, committed: int) -> None:
        """Records that the service acknowledged ``committed`` records of the shard."""
        if committed <= shard.acked:
            return
        ids = shard._ids_between(shard.acked, committed)
        shard.acked = committed
        if self.on_commit is not None and ids:
            self.on_commit(shard.epoch, ids)

    def _call(self, method: str, request: Any, lease_call: bool = False) -> Any:
        """Calls ``method``, retrying transient failures within the retry budget."""
        rpc = getattr(self._stub, method)
        give_up_at = time.monotonic() + self.retry_budget_s
        backoff = _BACKOFF_INITIAL_S
        while True:
            remaining = give_up_at - time.monotonic()
            try:
                return rpc(
                    request,
                    timeout=max(min(self.call_timeout_s, remaining), 0.05),
                    metadata=self._metadata,
                )
            except grpc.RpcError as e:
                code: grpc.StatusCode = e.code()
                details: str = e.details() or ""
                if code not in _RETRYABLE:
                    if lease_call and code == grpc.StatusCode.FAILED_PRECONDITION:
                        raise LeaseLostError(code, details) from None
                    raise ShardingError(code, details) from None
                remaining = give_up_at - time.monotonic()
                if remaining <= 0:
                    raise ShardingError(
                        code, f"{method}: {details} (gave up after retrying for {self.retry_budget_s:g} s)"
                    ) from None
                delay = min(random.uniform(backoff / 2, backoff), remaining)
                self.retries += 1
                _log.debug("%s: %s (%s); retrying in %.3f s", method, code.name, details, delay)
                self._sleep_connecting(delay)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)

    def _sleep_connecting(self, delay_s: float) -> None:
        """Sleeps ``delay_s`` while letting the channel reconnect.

        gRPC Python advances a channel's connection attempt only while some
        thread polls it; a fail-fast call in TRANSIENT_FAILURE returns at once,
        so without this a reconnect to a restarted service stalls until gRPC's
        5 s backup poller. Watching the channel's state keeps it polled.
        """
        self._channel.subscribe(_ignore_state, try_to_connect=True)
        try:
            time.sleep(delay_s)
        finally:
            self._channel.unsubscribe(_ignore_state)


def _ignore_state(_state: grpc.ChannelConnectivity) -> None:
    """A no-op connectivity callback (see ShardingClient._sleep_connecting)."""
