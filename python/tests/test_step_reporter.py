"""Tests of the Python StepReporter against the real antdt-agent, and of its
directive bookkeeping against an in-process fake agent.

Needs ANTDT_BIN_DIR (the directory of antdt-agent) and the generated stubs on
PYTHONPATH; ctest's python_sdk_test sets both.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import unittest
import urllib.request
from concurrent import futures
from typing import Dict, List, Optional, Tuple
from unittest import mock

import grpc

from antdt import StepReporter
from antdt.steps import ENV_AGENT_ADDR, ENV_AGENT_ADDRESS
from antdt.v1 import agent_pb2, agent_pb2_grpc, monitor_pb2
from server_process import ServerProcess

JOB = "j"
WORKER = "py-0"
# Generous: a report on a cold channel connects first, and the machine may be busy.
TIMEOUT_S = 5.0


class Agent(ServerProcess):
    """antdt-agent in a subprocess, serving TCP, a unix socket and /metrics."""

    def __init__(self, workdir: str) -> None:
        super().__init__("antdt-agent", workdir)
        self.tcp = self.socket = self.metrics = ""

    def start(self, timeout_s: float = 30.0) -> None:
        """Starts the agent and waits for its ready file."""
        lines = self.spawn(
            ["--node", "n1", "--listen", "127.0.0.1:0",
             "--socket", os.path.join(self.workdir, "agent.sock"),
             "--metrics-listen", "127.0.0.1:0", "--interval", "200ms"], timeout_s)
        self.tcp = lines[0]
        fields = dict(line.split("=", 1) for line in lines[1:])
        self.socket = fields["socket"]
        self.metrics = fields["metrics"]
        assert self.socket.startswith("unix:"), self.socket

    def scrape(self) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]:
        """The agent's /metrics as {(name, sorted labels): value}."""
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        out: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float] = {}
        for line in text.splitlines():
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)", line)
            if m is None or line.startswith("#"):
                continue
            labels = tuple(sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                             m.group(2) or "")))
            out[(m.group(1), labels)] = float(m.group(3))
        return out


def worker_labels(worker: str = WORKER, role: str = "worker") -> Tuple[Tuple[str, str], ...]:
    return tuple(sorted({"job": JOB, "role": role, "worker": worker}.items()))


class StepReporterAgentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.workdir = tempfile.mkdtemp(prefix="antdt-py-steps-")
        cls.agent = Agent(cls.workdir)
        try:
            cls.agent.start()
        except BaseException:
            cls.agent.stop()
            shutil.rmtree(cls.workdir, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        cls.agent.stop()
        shutil.rmtree(cls.workdir, ignore_errors=True)

    def setUp(self) -> None:
        self.reporters: List[StepReporter] = []

    def tearDown(self) -> None:
        for r in self.reporters:
            r.close()

    def reporter(self, address: Optional[str], worker: str = WORKER, role: str = "worker",
                 timeout_s: float = TIMEOUT_S) -> StepReporter:
        r = StepReporter(address, JOB, worker, role=role, timeout_s=timeout_s)
        self.reporters.append(r)
        return r

    def test_steps_over_unix_socket_and_tcp_are_counted(self) -> None:
        over_unix = self.reporter(self.agent.socket)
        over_tcp = self.reporter(self.agent.tcp)
        with mock.patch.dict(os.environ, {ENV_AGENT_ADDR: self.agent.socket}):
            from_env = self.reporter(None)
        self.assertEqual(from_env.agent_address, self.agent.socket)

        samples = 0
        for step in range(3):
            self.assertTrue(over_unix.report(step, 64, 0.05, data_wait_seconds=0.01,
                                             compute_seconds=0.03, communication_seconds=0.01))
            samples += 64
        for step in range(3, 5):
            self.assertTrue(over_tcp.report(step, 32, 0.02, ps_latency_seconds={"ps-0": 0.004}))
            samples += 32
        with over_tcp.step(samples=16) as s:
            s.compute_seconds = 0.001
        self.assertEqual(s.step, 5)
        self.assertTrue(s.reported)
        self.assertGreater(s.bpt_seconds, 0)
        samples += 16
        self.assertTrue(from_env.report(6, 8, 0.01))
        samples += 8
        # Another role of the same job is counted apart.
        self.assertTrue(self.reporter(self.agent.tcp, worker="ps-0", role="ps").report(0, 0, 0.001))

        for r in self.reporters:
            self.assertEqual(r.failures, 0, r.last_error)
        metrics = self.agent.scrape()
        self.assertEqual(metrics[("antdt_worker_steps_total", worker_labels())], 7)
        self.assertEqual(metrics[("antdt_worker_samples_total", worker_labels())], samples)
        self.assertEqual(metrics[("antdt_worker_step_seconds_count", worker_labels())], 7)
        self.assertEqual(metrics[("antdt_worker_steps_total", worker_labels("ps-0", "ps"))], 1)

    def test_the_namespace_from_the_environment_labels_the_workers_series(self) -> None:
        with mock.patch.dict(os.environ, {"ANTDT_NAMESPACE": "team-a"}):
            r = self.reporter(self.agent.tcp, worker="py-ns")
        self.assertEqual(r.namespace, "team-a")
        self.assertTrue(r.report(0, 16, 0.01), r.last_error)
        labels = tuple(sorted({"job": JOB, "namespace": "team-a", "role": "worker",
                               "worker": "py-ns"}.items()))
        self.assertEqual(self.agent.scrape()[("antdt_worker_steps_total", labels)], 1)

    def test_bad_arguments_raise_value_error_naming_the_argument(self) -> None:
        r = self.reporter(self.agent.socket, worker="py-bad")
        nan, inf = math.nan, math.inf
        cases = [
            ("bpt_seconds", dict(bpt_seconds=-0.1)),
            ("bpt_seconds", dict(bpt_seconds=nan)),
            ("bpt_seconds", dict(bpt_seconds=inf)),
            ("bpt_seconds", dict(bpt_seconds="0.1")),
            ("samples", dict(samples=-1)),
            ("samples", dict(samples=1.5)),
            ("step", dict(step=-1)),
            ("batch_samples", dict(batch_samples=-1)),
            ("data_wait_seconds", dict(data_wait_seconds=nan)),
            ("compute_seconds", dict(compute_seconds=-1)),
            ("communication_seconds", dict(communication_seconds=inf)),
            ("ps_latency_seconds", dict(ps_latency_seconds={"ps-0": -0.001})),
            ("ps_latency_seconds", dict(ps_latency_seconds={"": 0.001})),
        ]
        for name, bad in cases:
            args = dict(step=1, samples=8, bpt_seconds=0.01)
            args.update(bad)
            with self.subTest(bad=bad):
                with self.assertRaisesRegex(ValueError, f"^{re.escape(name)}"):
                    r.report(**args)  # type: ignore[arg-type]
        with self.assertRaisesRegex(ValueError, "^samples"):
            r.step(samples=-1)

        with self.assertRaisesRegex(ValueError, "^data_wait_seconds"):
            with r.step(samples=8) as s:
                s.data_wait_seconds = -1.0

        for name, kwargs in [
            ("role", dict(role="chief")),
            ("job", dict(job="")),
            ("worker_id", dict(worker_id="")),
            ("timeout_s", dict(timeout_s=0)),
            ("timeout_s", dict(timeout_s=nan)),
            ("agent_address", dict(agent_address="")),
        ]:
            full = dict(agent_address=self.agent.socket, job=JOB, worker_id="w", role="worker")
            full.update(kwargs)
            with self.subTest(kwargs=kwargs):
                with self.assertRaisesRegex(ValueError, f"^{name}"):
                    StepReporter(**full)  # type: ignore[arg-type]

        # Nothing was sent: no failure counted, and the agent never saw the worker.
        self.assertEqual(r.failures, 0)
        self.assertNotIn(("antdt_worker_steps_total", worker_labels("py-bad")), self.agent.scrape())

    def test_dead_agent_fails_fast_without_raising(self) -> None:
        # A closed TCP port and a missing socket: the connection is refused.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        # A listener that never answers: the connection hangs until the deadline.
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        self.addCleanup(silent.close)
        addresses = [
            f"127.0.0.1:{port}",
            f"unix:{os.path.join(self.workdir, 'nobody.sock')}",
            f"127.0.0.1:{silent.getsockname()[1]}",
        ]
        timeout_s = 0.2
        for address in addresses:
            with self.subTest(address=address):
                r = self.reporter(address, timeout_s=timeout_s)
                started = time.monotonic()
                for step in range(3):
                    self.assertFalse(r.report(step, 8, 0.01))
                    with r.step(samples=8) as s:
                        pass
                    self.assertFalse(s.reported)
                elapsed = time.monotonic() - started
                self.assertEqual(r.failures, 6)
                self.assertIsNotNone(r.last_error)
                self.assertLess(elapsed, 6 * timeout_s + 2.0, r.last_error)
                self.assertIsNone(r.take_directive())


class StepReporterEnvTest(unittest.TestCase):
    """Arguments left out come from the environment the operator and the runner set."""

    def from_env(self, env: Dict[str, str], **kwargs: str) -> StepReporter:
        with mock.patch.dict(os.environ, env, clear=True):
            r = StepReporter(**kwargs)  # type: ignore[arg-type]
        self.addCleanup(r.close)
        return r

    def test_agent_address_from_addr_or_older_address(self) -> None:
        ids = {"ANTDT_JOB": JOB, "ANTDT_WORKER_ID": WORKER}
        cases = [
            ("ADDR", {ENV_AGENT_ADDR: "127.0.0.1:1"}, "127.0.0.1:1"),
            ("ADDRESS", {ENV_AGENT_ADDRESS: "unix:/a.sock"}, "unix:/a.sock"),
            ("both: ADDR wins", {ENV_AGENT_ADDR: "127.0.0.1:1", ENV_AGENT_ADDRESS: "unix:/a.sock"},
             "127.0.0.1:1"),
            ("empty ADDR is unset", {ENV_AGENT_ADDR: "", ENV_AGENT_ADDRESS: "unix:/a.sock"},
             "unix:/a.sock"),
        ]
        for name, env, want in cases:
            with self.subTest(name):
                r = self.from_env({**ids, **env})
                self.assertEqual((r.agent_address, r.job, r.worker_id), (want, JOB, WORKER))

    def test_given_arguments_win_over_the_environment(self) -> None:
        r = self.from_env({ENV_AGENT_ADDR: "127.0.0.1:1", "ANTDT_JOB": "other",
                           "ANTDT_WORKER_ID": "other"},
                          agent_address="127.0.0.1:2", job=JOB, worker_id=WORKER)
        self.assertEqual((r.agent_address, r.job, r.worker_id), ("127.0.0.1:2", JOB, WORKER))

    def test_neither_given_nor_set_raises_naming_the_argument(self) -> None:
        full = {ENV_AGENT_ADDR: "127.0.0.1:1", "ANTDT_JOB": JOB, "ANTDT_WORKER_ID": WORKER}
        for argument, variable, pattern in [
            ("agent_address", ENV_AGENT_ADDR,
             f"^agent_address: not given and neither \\${ENV_AGENT_ADDR} nor "
             f"\\${ENV_AGENT_ADDRESS} is set"),
            ("job", "ANTDT_JOB", "^job: not given and \\$ANTDT_JOB is not set"),
            ("worker_id", "ANTDT_WORKER_ID", "^worker_id: not given and \\$ANTDT_WORKER_ID"),
        ]:
            env = {k: v for k, v in full.items() if k != variable}
            with self.subTest(argument):
                with self.assertRaisesRegex(ValueError, pattern):
                    self.from_env(env)


class FakeAgent(agent_pb2_grpc.AgentServicer):
    """Answers each ReportStep with the next scripted directives; records requests."""

    def __init__(self, answers: List[List[monitor_pb2.Directive]]) -> None:
        self._lock = threading.Lock()
        self._answers = list(answers)
        self.requests: List[agent_pb2.ReportStepRequest] = []

    def ReportStep(self, request: agent_pb2.ReportStepRequest,
                   context: grpc.ServicerContext) -> agent_pb2.ReportStepResponse:
        with self._lock:
            copy = agent_pb2.ReportStepRequest()
            copy.CopyFrom(request)
            self.requests.append(copy)
            directives = self._answers.pop(0) if self._answers else []
        return agent_pb2.ReportStepResponse(directives=directives)

    def applied_versions(self) -> List[int]:
        with self._lock:
            return [r.applied_directive_version for r in self.requests]


def directive(version: int, batch: int) -> monitor_pb2.Directive:
    return monitor_pb2.Directive(job=JOB, worker_id=WORKER, version=version, reason="test",
                                 adjust_batch=monitor_pb2.AdjustBatch(local_batch_size=batch))


class StepReporterDirectiveTest(unittest.TestCase):
    def serve(self, answers: List[List[monitor_pb2.Directive]]) -> Tuple[FakeAgent, StepReporter]:
        fake = FakeAgent(answers)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        agent_pb2_grpc.add_AgentServicer_to_server(fake, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.addCleanup(server.stop, None)
        reporter = StepReporter(f"127.0.0.1:{port}", JOB, WORKER, timeout_s=TIMEOUT_S)
        self.addCleanup(reporter.close)
        return fake, reporter

    def test_directive_is_taken_once_then_acknowledged(self) -> None:
        fake, r = self.serve([[directive(2, 48)]])
        self.assertIsNone(r.take_directive())
        self.assertTrue(r.report(0, 64, 0.05))
        d = r.take_directive()
        assert d is not None
        self.assertEqual((d.version, d.adjust_batch.local_batch_size), (2, 48))
        self.assertEqual(r.applied_version, 2)
        self.assertIsNone(r.take_directive())
        self.assertTrue(r.report(1, 48, 0.04))
        self.assertIsNone(r.take_directive())
        self.assertEqual(fake.applied_versions(), [0, 2])
        self.assertEqual(r.failures, 0)

    def test_a_later_move_of_a_parameter_server_does_not_hide_a_batch_change(self) -> None:
        move = monitor_pb2.Directive(
            job=JOB, worker_id=WORKER, version=5, reason="test",
            move_parameter_server=monitor_pb2.MoveParameterServer(ps_id="ps-1",
                                                                  address="127.0.0.1:7"))
        _, r = self.serve([[directive(4, 40), move]])
        self.assertTrue(r.report(0, 64, 0.05))
        d = r.take_directive()
        assert d is not None
        self.assertEqual((d.version, d.adjust_batch.local_batch_size), (4, 40))

    def test_newest_directive_wins_and_stale_ones_are_ignored(self) -> None:
        fake, r = self.serve([[directive(3, 32), directive(4, 16)], [directive(2, 48)], []])
        self.assertTrue(r.report(0, 64, 0.05))
        # Received but not taken yet: the agent need not send it again.
        self.assertTrue(r.report(1, 64, 0.05))
        self.assertTrue(r.report(2, 64, 0.05))
        d = r.take_directive()
        assert d is not None
        self.assertEqual((d.version, d.adjust_batch.local_batch_size), (4, 16))
        self.assertIsNone(r.take_directive())
        self.assertEqual(fake.applied_versions(), [0, 4, 4])

    def test_step_timer_measures_and_numbers_steps(self) -> None:
        fake, r = self.serve([])
        with r.step(samples=8) as s:
            time.sleep(0.05)
            s.data_wait_seconds = 0.01
            s.ps_latency_seconds["ps-0"] = 0.002
        self.assertTrue(s.reported)
        with r.step(samples=8) as s2:
            s2.samples = 5  # cut short: 3 samples go into a later step
            s2.batch_samples = 8
        with self.assertRaises(RuntimeError):
            with r.step(samples=8):
                raise RuntimeError("the step failed")  # reports nothing
        self.assertTrue(r.report(10, 8, 0.01))
        with r.step(samples=8):
            pass

        steps = [req.step for req in fake.requests]
        self.assertEqual([s.step for s in steps], [0, 1, 10, 11])
        self.assertEqual([s.samples for s in steps], [8, 5, 8, 8])
        self.assertEqual([s.batch_samples for s in steps], [0, 8, 0, 0])
        self.assertGreaterEqual(steps[0].bpt_seconds, 0.05)
        self.assertAlmostEqual(steps[0].bpt_seconds, s.bpt_seconds)
        self.assertEqual(steps[0].data_wait_seconds, 0.01)
        self.assertEqual(dict(steps[0].ps_latency_seconds), {"ps-0": 0.002})
        self.assertEqual((steps[0].job, steps[0].worker_id, steps[0].role), (JOB, WORKER, "worker"))
        self.assertEqual(steps[0].pid, os.getpid())
        self.assertGreater(steps[0].time_unix_ms, 0)


if __name__ == "__main__":
    unittest.main()
