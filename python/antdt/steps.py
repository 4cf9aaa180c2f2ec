"""Step reports to the node agent (``antdt.v1.Agent/ReportStep``).

A worker reports every training step (samples, batch processing time and, where
it can tell, the data-wait / compute / communication split) to the agent on its
node; the answer carries the directives the Controller sent for this worker,
e.g. a new local batch size. The Python counterpart of
``client/step_reporter.h``.

A report never stalls training for long: each call has a short deadline
(``timeout_s``), and a failed call is counted in :attr:`StepReporter.failures`
and answered ``False`` instead of raising. Arguments that the agent would
refuse raise :class:`ValueError` naming the argument, before anything is sent.

Arguments left out are read from the environment the operator and the local
runner give every worker: the agent's address from ``$ANTDT_AGENT_ADDR`` (or,
when that is not set, the older ``$ANTDT_AGENT_ADDRESS``), the job from
``$ANTDT_JOB`` and the worker's id from ``$ANTDT_WORKER_ID``.

Example::

    reporter = StepReporter()  # $ANTDT_AGENT_ADDR, $ANTDT_JOB, $ANTDT_WORKER_ID
    for batch in loader:
        with reporter.step(samples=len(batch)) as s:
            train_on(batch)
        directive = reporter.take_directive()
        if directive is not None and directive.HasField("adjust_batch"):
            loader.set_batch_size(directive.adjust_batch.local_batch_size)

Not thread-safe: use one reporter per worker thread.
"""

from __future__ import annotations

import logging
import math
import operator
import os
import time
from types import TracebackType
from typing import Any, Dict, Mapping, Optional, Type

import grpc

from antdt import _env
from antdt.v1 import agent_pb2 as pb
from antdt.v1 import agent_pb2_grpc as pb_grpc
from antdt.v1 import monitor_pb2

__all__ = ["ENV_AGENT_ADDR", "ENV_AGENT_ADDRESS", "StepReporter", "StepTimer"]

_log = logging.getLogger(__name__)

#: The environment variable that holds the agent's address when none is given.
ENV_AGENT_ADDR = "ANTDT_AGENT_ADDR"
#: Its older name, read when ``$ANTDT_AGENT_ADDR`` is not set.
ENV_AGENT_ADDRESS = "ANTDT_AGENT_ADDRESS"

_ROLES = ("worker", "ps")
_INT64_MAX = 2**63 - 1


class StepReporter:
    """Reports one worker's steps to its node agent and keeps its directives.

    Args:
        agent_address: ``"unix:/path/agent.sock"`` or ``"HOST:PORT"``; None
            reads ``$ANTDT_AGENT_ADDR``, else ``$ANTDT_AGENT_ADDRESS``.
        job, worker_id: this worker's job and stable id; None reads
            ``$ANTDT_JOB`` and ``$ANTDT_WORKER_ID``.
        role: ``"worker"`` or ``"ps"``.
        timeout_s: the deadline of each report.

    Raises:
        ValueError: an argument is invalid, or one is neither given nor set.
    """

    def __init__(
        self,
        agent_address: Optional[str] = None,
        job: Optional[str] = None,
        worker_id: Optional[str] = None,
        role: str = "worker",
        timeout_s: float = 0.2,
    ) -> None:
        agent_address = _env.given_or_env(
            "agent_address", agent_address, ENV_AGENT_ADDR, ENV_AGENT_ADDRESS)
        job = _env.given_or_env("job", job, _env.JOB)
        worker_id = _env.given_or_env("worker_id", worker_id, _env.WORKER_ID)
        if not agent_address:
            raise ValueError("agent_address: must not be empty")
        if not job:
            raise ValueError("job: must not be empty")
        if not worker_id:
            raise ValueError("worker_id: must not be empty")
        if role not in _ROLES:
            raise ValueError(f'role: must be "worker" or "ps", got {role!r}')
        if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s: must be a finite number of seconds > 0, got {timeout_s!r}")
        self.agent_address = agent_address
        self.job = job
        #: The job's namespace, from ``$ANTDT_NAMESPACE`` ("" when not set): a
        #: ``namespace`` label on the agent's series of this worker.
        self.namespace = _env.first_set(_env.NAMESPACE) or ""
        # The pod's UID ($ANTDT_POD_UID, from the downward API): the agent finds
        # this worker's cgroup by it.
        self._pod_uid = _env.first_set("ANTDT_POD_UID") or ""
        self.worker_id = worker_id
        self.role = role
        self.timeout_s = float(timeout_s)
        self.failures = 0  #: reports that failed (transport errors, deadlines)
        self.last_error: Optional[str] = None  #: ``"CODE: details"`` of the latest failure
        self._applied_version = 0
        self._pending: Optional[monitor_pb2.Directive] = None
        self._next_step = 0
        # Reconnect quickly once a restarted agent listens again, as the C++ SDK does.
        self._channel = _env.channel(
            agent_address,
            options=[
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 2000),
            ],
        )
        self._stub = pb_grpc.AgentStub(self._channel)
        # The job's credential ($ANTDT_TOKEN or $ANTDT_TOKEN_FILE): the Monitor counts a job's
        # reports only with it. An unreadable file raises ValueError naming it.
        token = _env.token()
        self._metadata = (("authorization", "Bearer " + token),) if token else ()

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """Closes the channel."""
        self._channel.close()

    def __enter__(self) -> "StepReporter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- reports -----------------------------------------------------------

    @property
    def applied_version(self) -> int:
        """The version of the newest directive taken with :meth:`take_directive` (0: none)."""
        return self._applied_version

    @property
    def next_step(self) -> int:
        """The step number :meth:`step` uses next: one past the last reported step."""
        return self._next_step

    def report(
        self,
        step: int,
        samples: int,
        bpt_seconds: float,
        data_wait_seconds: float = 0.0,
        compute_seconds: float = 0.0,
        communication_seconds: float = 0.0,
        ps_latency_seconds: Optional[Mapping[str, float]] = None,
        batch_samples: int = 0,
    ) -> bool:
        """Reports one step; returns whether the agent acknowledged it.

        Args:
            step: the step's number (>= 0).
            samples: samples processed in the step (>= 0).
            bpt_seconds: the step's batch processing time.
            data_wait_seconds, compute_seconds, communication_seconds: where
                the step's time went, where known (0: unknown).
            ps_latency_seconds: for a worker, the latency it observed per
                parameter server (``{"ps-0": 0.004}``).
            batch_samples: the batch the step was to train, when the step was
                cut short and the rest went into a later step (0: ``samples``
                was the whole batch). The Monitor then judges the step by what
                the whole batch would have taken.

        Raises:
            ValueError: an argument is invalid (negative, NaN, infinite or not
                a number); the message starts with the argument's name.
        """
        request = pb.ReportStepRequest(
            step=monitor_pb2.StepReport(
                job=self.job,
                worker_id=self.worker_id,
                role=self.role,
                namespace=self.namespace,
                step=_count("step", step),
                samples=_count("samples", samples),
                bpt_seconds=_seconds("bpt_seconds", bpt_seconds),
                data_wait_seconds=_seconds("data_wait_seconds", data_wait_seconds),
                compute_seconds=_seconds("compute_seconds", compute_seconds),
                communication_seconds=_seconds("communication_seconds", communication_seconds),
                time_unix_ms=int(time.time() * 1000),
                pid=os.getpid(),
                pod_uid=self._pod_uid,
                ps_latency_seconds=_latencies(ps_latency_seconds),
                batch_samples=_count("batch_samples", batch_samples),
            ),
            # A directive received but not taken yet need not be sent again.
            applied_directive_version=self._known_version(),
        )
        self._next_step = request.step.step + 1
        try:
            response = self._stub.ReportStep(
                request, timeout=self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as e:
            self.failures += 1
            self.last_error = f"{e.code().name}: {e.details() or ''}"
            _log.debug("ReportStep to %s failed: %s", self.agent_address, self.last_error)
            return False
        for directive in response.directives:
            # The batch changes this SDK applies; the agent also keeps other
            # kinds apart (a parameter server's move, for the demo trainer),
            # which must not hide one.
            if directive.HasField("adjust_batch") and directive.version > self._known_version():
                self._pending = directive
        return True

    def step(self, samples: int, step: Optional[int] = None) -> "StepTimer":
        """Times one step: ``with reporter.step(samples=64) as s: ...``.

        The step's BPT is measured with :func:`time.perf_counter` from entering
        the block to leaving it, and the step is reported on leaving it (set
        ``s.samples``, ``s.data_wait_seconds`` and the like inside the block to
        correct or complete the report). ``step`` defaults to
        :attr:`next_step`. A block that raises reports nothing.
        """
        return StepTimer(self, self._next_step if step is None else step, samples)

    # -- directives --------------------------------------------------------

    def take_directive(self) -> Optional[monitor_pb2.Directive]:
        """The newest directive not yet taken, or None; taking it marks it applied."""
        directive, self._pending = self._pending, None
        if directive is not None:
            self._applied_version = directive.version
        return directive

    def _known_version(self) -> int:
        """The newest directive version taken or waiting to be taken."""
        if self._pending is None:
            return self._applied_version
        return max(self._applied_version, self._pending.version)


class StepTimer:
    """One step being timed by :meth:`StepReporter.step`; see there.

    After the block, :attr:`bpt_seconds` holds the measured time and
    :attr:`reported` whether the agent acknowledged the report.
    """

    def __init__(self, reporter: StepReporter, step: int, samples: int) -> None:
        self.step = _count("step", step)
        self.samples = _count("samples", samples)
        self.data_wait_seconds = 0.0
        self.compute_seconds = 0.0
        self.communication_seconds = 0.0
        self.ps_latency_seconds: Dict[str, float] = {}
        self.batch_samples = 0  # set when the step was cut short (see report)
        self.bpt_seconds = 0.0
        self.reported = False
        self._reporter = reporter
        self._start = 0.0

    def __enter__(self) -> "StepTimer":
        self._start = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.bpt_seconds = time.perf_counter() - self._start
        if exc_type is not None:
            return
        self.reported = self._reporter.report(
            self.step,
            self.samples,
            self.bpt_seconds,
            data_wait_seconds=self.data_wait_seconds,
            compute_seconds=self.compute_seconds,
            communication_seconds=self.communication_seconds,
            ps_latency_seconds=self.ps_latency_seconds,
            batch_samples=self.batch_samples,
        )


# -- argument checks -----------------------------------------------------------


def _count(name: str, value: Any) -> int:
    """``value`` as an int64 >= 0, or ValueError naming ``name``."""
    try:
        n = operator.index(value)  # ints and integer-like (numpy) values, not floats
    except TypeError:
        raise ValueError(f"{name}: must be an integer >= 0, got {value!r}") from None
    if isinstance(value, bool) or not 0 <= n <= _INT64_MAX:
        raise ValueError(f"{name}: must be an integer >= 0, got {value!r}")
    return n


def _seconds(name: str, value: Any) -> float:
    """``value`` as a finite float >= 0, or ValueError naming ``name``."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be a finite number of seconds >= 0, got {value!r}") from None
    if isinstance(value, (bool, str, bytes)) or not math.isfinite(x) or x < 0:
        raise ValueError(f"{name}: must be a finite number of seconds >= 0, got {value!r}")
    return x


def _latencies(latencies: Optional[Mapping[str, float]]) -> Dict[str, float]:
    """The checked per-PS latencies, or ValueError naming the entry."""
    out: Dict[str, float] = {}
    for ps, latency in (latencies or {}).items():
        if not isinstance(ps, str) or not ps:
            raise ValueError(f"ps_latency_seconds: keys must be non-empty strings, got {ps!r}")
        out[ps] = _seconds(f"ps_latency_seconds[{ps!r}]", latency)
    return out
