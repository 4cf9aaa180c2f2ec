"""Synchronous DDP training over AntDT's dynamic sharding: :class:`Session`.

A session owns one rank's side of a job: the process group
(:class:`~antdt.torch.group.ElasticGroup`), the data
(:class:`~antdt.torch.data.ShardedDataset` through a ``DataLoader``), the
commits and their journal, step reports to the node agent and the Controller's
directives. The user gives the model, the optimizer and one function that
trains one step; :meth:`Session.run` does the rest::

    session = Session.from_env(sample_fn=data.__getitem__)
    model = session.wrap(net)                       # DistributedDataParallel
    def train_step(step):
        total = 0.0
        for i, (x, y) in enumerate(step.micro_batches):
            with step.sync(i):                      # no_sync but for the last
                loss = F.cross_entropy(model(x), y, reduction="sum")
                (loss * step.loss_scale).backward()
            total += loss.item()
        return total                                # the rank's summed loss
    session.run(train_step, optimizer)

Per optimizer step, every rank:

1. assembles ``local_batch x accumulation_steps`` records (fewer when the
   service has none free now, or none left: such a rank trains a zero-weight
   copy of its last batch so the collectives match — the equivalent of
   ``Join`` for uneven step counts);
2. takes part in one small collective: every rank's sample count, whether its
   data is done, the batch it proposes (from a directive) and the previous
   step's summed loss. From it every rank computes the same global sample count
   ``G`` and the same decisions;
3. trains: ``loss_scale = world_size / G`` on summed per-sample losses makes
   DDP's average of the ranks' gradients the mean over the global batch, for
   any split of ``G`` among ranks and micro-batches;
4. after ``optimizer.step()``, commits exactly the records it trained on.

A directive (ADJUST_BS: a new local batch and accumulation steps) is applied by
all ranks at the same step boundary, once the proposals of every rank keep the
global batch (or, should part of a plan never arrive, after
``directive_patience`` steps). A rank that dies (a crash, or the Controller's
KILL_RESTART) breaks the group: the survivors keep their model and their
uncommitted step, the group forms again when the rank's next incarnation joins,
the model and optimizer state go from the most advanced rank to the others, and
training goes on. Records are committed exactly once throughout.

BPT as reported to the agent is the rank's own time for the step (assembling
its records, compute up to the moment its last gradient bucket is ready, the
optimizer and the commit), not the time it waits for slower ranks in the two
collectives, which is reported as communication: so the Monitor sees which rank
is slow although synchronous steps end together.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import os
import time
from typing import Any, Callable, Iterator, List, Optional, TextIO

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data._utils.collate import default_collate

from antdt import _env
from antdt.steps import StepReporter
from antdt.torch import checkpoint as ckpt
from antdt.torch.data import WAIT, ClientSpec, Record, ShardedDataset, StepCommits
from antdt.torch.group import ElasticGroup
from antdt.torch.journal import Journal

__all__ = ["Session", "Step", "Summary"]

_log = logging.getLogger(__name__)

# Columns of a rank's row in the per-step collective.
_COUNT, _DONE, _BS, _ACC, _CUR_BS, _CUR_ACC, _LOSS, _LOSS_N, _NCOLS = range(9)


@dataclasses.dataclass
class Step:
    """One optimizer step of one rank, as :meth:`Session.run` hands it to the
    user's step function."""

    number: int  #: the optimizer step's number (the same on every rank)
    micro_batches: List[Any]  #: collated micro-batches, in order
    loss_scale: float  #: multiply summed per-sample losses by this (0: a filler step)
    samples: int  #: records of this rank in the step (0: a filler step)
    global_samples: int  #: records of every rank in the step
    model: Optional[DistributedDataParallel] = None

    def sync(self, index: int) -> contextlib.AbstractContextManager:
        """The context for micro-batch ``index``: gradients are synchronised
        on the last one only (``no_sync`` before)."""
        if self.model is None or index == len(self.micro_batches) - 1:
            return contextlib.nullcontext()
        return self.model.no_sync()


@dataclasses.dataclass
class Summary:
    """What :meth:`Session.run` did on this rank."""

    steps: int = 0  #: optimizer steps taken
    records_trained: int = 0  #: records this rank trained on (committed or not)
    records_committed: int = 0  #: records this rank's commits were acknowledged for
    refused_commits: int = 0  #: commits refused (a lease lost; others redo them)
    regroups: int = 0  #: times the group formed again after a failure
    batch_changes: int = 0  #: directives applied
    seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class _StepTimes:
    """Where one rank's step went, in seconds."""

    samples: int
    data: float  #: assembling the step's records
    exchange: float  #: the per-step collective (waiting for the slowest rank's arrival)
    compute: float  #: forward and backward, up to the last gradient bucket ready
    sync: float  #: after that, until backward returned (the gradient allreduce)
    optimizer: float  #: optimizer.step() and zero_grad()


@dataclasses.dataclass
class _Pending:
    """A step's records, assembled and not yet committed."""

    records: List[Record]
    exhausted: bool  #: the data iterator ended (no more records for this rank)


def _is_group_failure(e: BaseException) -> bool:
    """Whether ``e`` is a peer or transport failure (the group must form again)
    rather than a bug in the step."""
    text = str(e)
    markers = ("Connection", "connection", "gloo", "Gloo", "NCCL", "Timed out", "timed out",
               "closed", "reset by peer", "Broken pipe", "store")
    return isinstance(e, RuntimeError) and any(m in text for m in markers)


class Session:
    """One rank's training session; see the module docstring.

    Args:
        client: this rank's sharding client (dataset, worker id, incarnation).
        sample_fn: ``record_id -> sample`` (map-style datasets: ``ds.__getitem__``).
        group: the process group.
        local_batch: this rank's share of the global batch now.
        accumulation_steps: micro-batches per optimizer step.
        collate_fn: turns a list of samples into a micro-batch.
        reporter: where step reports go (None: not reported).
        journal_path: the commit journal (None: none written).
        loss_log_path: rank 0 appends one JSON line per optimizer step here.
        checkpoint_path, checkpoint_every: rank 0 saves the model, the
            optimizer and the step there every that many steps (0: never), after
            the step's records are committed; a rank starting finds it there.
        num_workers, prefetch_factor: the DataLoader's.
        directive_patience: steps a partial batch plan waits before it applies.
    """

    def __init__(self, client: ClientSpec, sample_fn: Callable[[int], Any], group: ElasticGroup,
                 local_batch: int, accumulation_steps: int = 1,
                 collate_fn: Callable[[List[Any]], Any] = default_collate,
                 reporter: Optional[StepReporter] = None, journal_path: Optional[str] = None,
                 loss_log_path: Optional[str] = None, checkpoint_path: Optional[str] = None,
                 checkpoint_every: int = 0, num_workers: int = 0, prefetch_factor: int = 2,
                 directive_patience: int = 20) -> None:
        if local_batch < 1:
            raise ValueError(f"local_batch: must be >= 1, got {local_batch}")
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps: must be >= 1, got {accumulation_steps}")
        self.client_spec = client
        self.sample_fn = sample_fn
        self.group = group
        self.local_batch = local_batch
        self.accumulation_steps = accumulation_steps
        self.collate_fn = collate_fn
        self.reporter = reporter
        self.journal_path = journal_path
        self.loss_log_path = loss_log_path
        self.checkpoint_path = checkpoint_path
        self.checkpoint_every = checkpoint_every
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.directive_patience = directive_patience
        self.step = 0  #: optimizer steps done (the same on every rank)
        # Records every rank has trained on: the service's committed count when
        # this process started, plus each step's global sample count since.
        self._global_trained = 0
        self.summary = Summary()
        self.module: Optional[torch.nn.Module] = None
        self.model: Optional[DistributedDataParallel] = None
        self._ddp_kwargs: dict = {}
        self._proposal: Optional[tuple] = None  # (local_batch, accumulation_steps)
        self._last_batch: Optional[Any] = None
        self._prev_loss = (0.0, 0)  # this rank's (summed loss, samples) of the last step
        self._bucket_ready = 0.0
        self._waiting = 0  # steps an unbalanced batch plan has waited
        self._data_wait = 0.0
        self._exhausted = False  # the data iterator ended
        self._times: Optional[_StepTimes] = None
        self._logged_step = -1
        self._loss_log: Optional[TextIO] = None

    @classmethod
    def from_env(cls, sample_fn: Callable[[int], Any], backend: str = "gloo",
                 **kwargs: Any) -> "Session":
        """A session from the variables the operator and ``antdt run`` set:
        ANTDT_SHARDING_ADDR, ANTDT_JOB, ANTDT_DATASET, ANTDT_WORKER_ID,
        ANTDT_INCARNATION, ANTDT_LOCAL_BATCH, ANTDT_AGENT_ADDR, ANTDT_JOURNAL,
        ANTDT_LOSS_LOG, ANTDT_CHECKPOINT_PATH and the rendezvous's RANK,
        WORLD_SIZE, MASTER_ADDR, MASTER_PORT. ``kwargs`` override."""
        client = ClientSpec(_env.required("ANTDT_SHARDING_ADDR"), _env.required("ANTDT_JOB"),
                            _env.first_set("ANTDT_DATASET") or "train",
                            _env.required("ANTDT_WORKER_ID"), _env.count("ANTDT_INCARNATION", 0))
        reporter = None
        agent = _env.first_set("ANTDT_AGENT_ADDR", "ANTDT_AGENT_ADDRESS")
        if agent is not None:
            reporter = StepReporter(agent, job=client.job, worker_id=client.worker_id)
        checkpoint_dir = _env.first_set("ANTDT_CHECKPOINT_PATH")
        options = dict(
            group=ElasticGroup.from_env(backend=backend),
            local_batch=_env.count("ANTDT_LOCAL_BATCH", 0),
            reporter=reporter,
            journal_path=_env.first_set("ANTDT_JOURNAL"),
            loss_log_path=_env.first_set("ANTDT_LOSS_LOG"),
            checkpoint_path=os.path.join(checkpoint_dir, "model.pt") if checkpoint_dir else None,
        )
        options.update(kwargs)
        return cls(client, sample_fn, **options)

    # -- the model ------------------------------------------------------------

    def wrap(self, module: torch.nn.Module, **ddp_kwargs: Any) -> "_ModelProxy":
        """Wraps ``module`` in DistributedDataParallel (again after each
        formation of the group); returns a proxy that always calls the current
        wrapper, so keep and call it as the model."""
        self.module = module
        self._ddp_kwargs = ddp_kwargs
        return _ModelProxy(self)

    def _wrap_ddp(self) -> None:
        assert self.module is not None, "call Session.wrap(model) before run()"
        self.model = DistributedDataParallel(self.module, **self._ddp_kwargs)

        # No annotations: DDP checks them against dist.GradBucket, and this
        # module's are strings (from __future__ import annotations).
        def timed_allreduce(state, bucket):  # type: ignore[no-untyped-def]
            self._bucket_ready = time.perf_counter()  # this rank's gradients are ready
            return default_hooks.allreduce_hook(state, bucket)

        self.model.register_comm_hook(None, timed_allreduce)

    # -- the loop -------------------------------------------------------------

    def run(self, step_fn: Callable[[Step], float], optimizer: torch.optim.Optimizer) -> Summary:
        """Trains until every rank's data is done; returns this rank's summary.

        ``step_fn(step)`` runs forward and backward over ``step.micro_batches``
        (scaling summed losses by ``step.loss_scale``) and returns the rank's
        summed loss; the session calls ``optimizer.step()`` and
        ``optimizer.zero_grad()`` around it.
        """
        started = time.monotonic()
        client = self.client_spec.open()
        progress = self._progress(client)
        if progress is not None and progress.finished:
            # A rank restarted after the others trained the last records (or
            # after it finished itself and then failed on its way out): there
            # is nothing to train and no group left to join.
            _log.info("rank %d: the dataset is finished: nothing to train",
                      self.group.rank)
            client.close()
            self.summary.seconds = time.monotonic() - started
            return self.summary
        journal = Journal.open_and_resolve(self.journal_path, client)
        commits = StepCommits(client, journal)
        self._restore(optimizer, client)
        self._global_trained = int(progress.records_committed_total) if progress else 0
        self._form_retrying(optimizer)
        records = self._records()
        pending: Optional[_Pending] = None
        failures_in_a_row = 0
        try:
            while True:
                if pending is None:
                    pending = self._assemble(records)
                failure = None
                try:
                    finished = self._train(pending, step_fn, optimizer)
                    failures_in_a_row = 0
                except Exception as e:  # noqa: BLE001 (sorted out just below)
                    if not _is_group_failure(e) or failures_in_a_row >= 5:
                        raise
                    failure = str(e).splitlines()[0]
                # Out of the except block: its traceback no longer holds the
                # broken group's DDP wrapper, so the group really goes away.
                if failure is not None:
                    failures_in_a_row += 1
                    _log.warning("rank %d: step %d failed (%s); forming the group again",
                                 self.group.rank, self.step, failure)
                    optimizer.zero_grad(set_to_none=True)
                    if self._form_retrying(optimizer):  # others took the step: it is trained
                        self._commit(pending, commits)
                        pending = None
                    self.summary.regroups += 1
                    continue
                if finished:
                    break
                committing = time.perf_counter()
                self._commit(pending, commits)
                self._report(time.perf_counter() - committing)
                pending = None
                self._maybe_checkpoint(optimizer, client)
        finally:
            self.summary.records_committed = commits.committed
            self.summary.refused_commits = commits.refused
            self.summary.seconds = time.monotonic() - started
            journal.close()
            client.close()
            if self._loss_log is not None:
                self._loss_log.close()
                self._loss_log = None
            if self.reporter is not None:
                self.reporter.close()
        self.group.finish()
        return self.summary

    @staticmethod
    def _progress(client: Any) -> Any:
        """The dataset's progress; None when the service cannot say (not
        created yet, or unreachable: train, counting from 0)."""
        try:
            return client.progress()
        except Exception as e:  # noqa: BLE001 (sorted out by the caller: None)
            _log.debug("progress: %s", e)
            return None

    def _records(self) -> Iterator[Any]:
        dataset = ShardedDataset(self.client_spec, self.sample_fn)
        extra = {}
        if self.num_workers > 0:
            extra = dict(prefetch_factor=self.prefetch_factor, persistent_workers=False)
        loader = DataLoader(dataset, batch_size=None, num_workers=self.num_workers, **extra)
        return iter(loader)

    def _assemble(self, records: Iterator[Any]) -> _Pending:
        """Up to ``local_batch x accumulation_steps`` records, without waiting
        on the service while it has no free shard."""
        want = self.local_batch * self.accumulation_steps
        got: List[Record] = []
        started = time.perf_counter()
        while len(got) < want and not self._exhausted:
            try:
                item = next(records)
            except StopIteration:
                self._exhausted = True  # a DataLoader iterator must not be asked again
                break
            if item is WAIT:
                if got:
                    break  # train what there is
                if time.perf_counter() - started > 0.5:
                    break  # a filler step keeps the collective going
                continue
            got.append(item)
        self._data_wait = time.perf_counter() - started
        pending = _Pending(got, self._exhausted)
        return pending

    def _train(self, pending: _Pending, step_fn: Callable[[Step], float],
               optimizer: torch.optim.Optimizer) -> bool:
        """One step (or the finding that every rank is done). True: done."""
        started = time.perf_counter()
        rows = self._exchange(pending)
        if bool((rows[:, _DONE] == 1).all()) and float(rows[:, _COUNT].sum()) == 0:
            return True
        global_samples = int(rows[:, _COUNT].sum())
        self._global_trained += global_samples
        step = self._make_step(pending, global_samples)
        exchanged = time.perf_counter()
        self._bucket_ready = 0.0
        loss_sum = float(step_fn(step))
        trained = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        ready = self._bucket_ready or trained
        self._times = _StepTimes(step.samples, self._data_wait, exchanged - started,
                                 ready - exchanged, trained - ready,
                                 time.perf_counter() - trained)
        self.step += 1
        self.summary.steps = self.step
        self.summary.records_trained += step.samples
        self._prev_loss = (loss_sum if step.samples else 0.0, step.samples)
        self._decide(rows)
        return False

    def _exchange(self, pending: _Pending) -> torch.Tensor:
        """The step's collective: every rank's row, summed into one table."""
        rows = torch.zeros(self.group.world_size, _NCOLS, dtype=torch.float64)
        row = rows[self.group.rank]
        row[_COUNT] = len(pending.records)
        row[_DONE] = 1 if pending.exhausted else 0
        proposal = self._proposal or (self.local_batch, self.accumulation_steps)
        row[_BS], row[_ACC] = proposal
        row[_CUR_BS], row[_CUR_ACC] = self.local_batch, self.accumulation_steps
        row[_LOSS], row[_LOSS_N] = self._prev_loss
        dist.all_reduce(rows)
        self._log_loss(rows)
        return rows

    def _make_step(self, pending: _Pending, global_samples: int) -> Step:
        samples = [r.sample for r in pending.records]
        batches = [self.collate_fn(samples[i:i + self.local_batch])
                   for i in range(0, len(samples), self.local_batch)]
        scale = self.group.world_size / global_samples if global_samples else 0.0
        if batches:
            self._last_batch = batches[-1]
        else:  # nothing to train on: a zero-weight copy keeps the collectives matched
            if self._last_batch is None:
                self._last_batch = self.collate_fn([self.sample_fn(0)])
            batches, scale = [self._last_batch], 0.0
        return Step(self.step, batches, scale, len(samples), global_samples, self.model)

    def _commit(self, pending: _Pending, commits: StepCommits) -> None:
        for record in pending.records:
            commits.trained(record)
        commits.commit()

    # -- directives -------------------------------------------------------------

    def _report(self, commit_s: float) -> None:
        """Reports the step just committed: as BPT the rank's own time (data,
        compute up to its last gradient bucket, the optimizer, the commit),
        as communication the time it waited for the other ranks."""
        t = self._times
        if self.reporter is None or t is None or t.samples == 0:
            return
        own_compute = t.compute + t.optimizer + commit_s
        self.reporter.report(self.step, t.samples, t.data + own_compute,
                             data_wait_seconds=t.data, compute_seconds=own_compute,
                             communication_seconds=t.exchange + t.sync)
        directive = self.reporter.take_directive()
        if directive is not None and directive.HasField("adjust_batch"):
            adjust = directive.adjust_batch
            self.propose(adjust.local_batch_size, adjust.accumulation_steps or 1)

    def propose(self, local_batch: int, accumulation_steps: int = 1) -> None:
        """Asks for a new local batch (a directive's): every rank applies the
        proposals together at a step boundary that keeps the global batch."""
        if local_batch < 1 or accumulation_steps < 1:
            raise ValueError(f"local_batch, accumulation_steps: must be >= 1, got "
                             f"{local_batch}, {accumulation_steps}")
        self._proposal = (int(local_batch), int(accumulation_steps))

    def _decide(self, rows: torch.Tensor) -> None:
        """Applies the proposals when together they keep the global batch, or
        when a plan has waited ``directive_patience`` steps for its missing
        parts: the same decision on every rank, from the same table."""
        changed = (rows[:, _BS] != rows[:, _CUR_BS]) | (rows[:, _ACC] != rows[:, _CUR_ACC])
        if not bool(changed.any()):
            self._waiting = 0
            return
        proposed = float((rows[:, _BS] * rows[:, _ACC]).sum())
        current = float((rows[:, _CUR_BS] * rows[:, _CUR_ACC]).sum())
        if proposed != current and self._waiting + 1 < self.directive_patience:
            self._waiting += 1
            return
        if proposed != current:
            _log.warning("rank %d: batch plan incomplete after %d steps; applying it",
                         self.group.rank, self._waiting + 1)
        self._apply_proposal()

    def _apply_proposal(self) -> None:
        self._waiting = 0
        if self._proposal is None:
            return
        bs, acc = self._proposal
        if (bs, acc) != (self.local_batch, self.accumulation_steps):
            _log.info("rank %d: step %d: local batch %d x %d -> %d x %d", self.group.rank,
                      self.step, self.local_batch, self.accumulation_steps, bs, acc)
            self.summary.batch_changes += 1
        self.local_batch, self.accumulation_steps = bs, acc
        self._proposal = None

    # -- the group ---------------------------------------------------------------

    def _form_retrying(self, optimizer: torch.optim.Optimizer, attempts: int = 5) -> bool:
        """:meth:`_form`, again when a rank fails while the group forms (its
        state exchange, DDP's first broadcast): up to ``attempts`` times."""
        for attempt in range(1, attempts + 1):
            failure = None
            try:
                return self._form(optimizer)
            except Exception as e:  # noqa: BLE001 (sorted out just below)
                if not _is_group_failure(e) or attempt == attempts:
                    raise
                failure = str(e).splitlines()[0]
            # Out of the except block, as in run(): the broken group goes away.
            _log.warning("rank %d: forming the group failed (%s); again", self.group.rank,
                         failure)
        raise AssertionError("unreachable")

    def _form(self, optimizer: torch.optim.Optimizer) -> bool:
        """Forms the group and brings every rank to the most advanced rank's
        model and optimizer. True when that rank is ahead of this one (this
        rank's uncommitted step was taken by the others: it is trained)."""
        # Drop the old DDP wrapper (it holds the old group): destroying the
        # group then closes its connections, so a survivor still blocked in a
        # collective with this rank fails at once instead of at the timeout.
        self.model = None
        gc.collect()
        self.group.form()
        steps = torch.zeros(self.group.world_size, dtype=torch.float64)
        steps[self.group.rank] = self.step
        dist.all_reduce(steps)
        best = int(steps.max())
        src = int((steps == best).nonzero()[0])
        ahead = best > self.step
        state = [None]
        if self.group.rank == src:
            state = [{"model": self.module.state_dict() if self.module is not None else None,
                      "optimizer": optimizer.state_dict(), "step": self.step}]
        dist.broadcast_object_list(state, src=src)
        if self.group.rank != src:
            if self.module is not None and state[0]["model"] is not None:
                self.module.load_state_dict(state[0]["model"])
            optimizer.load_state_dict(state[0]["optimizer"])
            self.step = state[0]["step"]
        if self.module is not None:
            self._wrap_ddp()
        return ahead

    def _restore(self, optimizer: torch.optim.Optimizer, client: Any) -> None:
        if self.checkpoint_path and self.module is not None:
            step = ckpt.load(self.checkpoint_path, self.module, optimizer, client)
            if step is not None:
                self.step = step

    def _maybe_checkpoint(self, optimizer: torch.optim.Optimizer, client: Any) -> None:
        if (self.checkpoint_every > 0 and self.group.rank == 0 and self.checkpoint_path
                and self.step % self.checkpoint_every == 0 and self.module is not None):
            # The other ranks commit their part of the step on their own: wait
            # (bounded) until the service has every record the model trained on.
            ckpt.save(self.checkpoint_path, self.module, optimizer, self.step, client,
                      expected_committed=self._global_trained)

    def _log_loss(self, rows: torch.Tensor) -> None:
        """Rank 0 logs the previous step's global mean loss (it rides on this
        step's collective: no extra one)."""
        n = float(rows[:, _LOSS_N].sum())
        if self.group.rank != 0 or not self.loss_log_path or n == 0 or self.step == 0:
            return
        if self._logged_step >= self.step:
            return
        self._logged_step = self.step
        line = {"time_unix": round(time.time(), 3), "step": self.step,
                "loss": float(rows[:, _LOSS].sum()) / n, "samples": int(n)}
        if self._loss_log is None:  # opened once, a line written (and flushed) per step
            os.makedirs(os.path.dirname(os.path.abspath(self.loss_log_path)), exist_ok=True)
            self._loss_log = open(self.loss_log_path, "a", buffering=1)
        self._loss_log.write(json.dumps(line) + "\n")


class _ModelProxy:
    """Calls the session's current DDP wrapper (a new one after each formation)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        model = self._session.model
        if model is None:
            raise RuntimeError("the model is wrapped once Session.run() formed the group")
        return model(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        model = self._session.model
        target = model if model is not None else self._session.module
        return getattr(target, name)
