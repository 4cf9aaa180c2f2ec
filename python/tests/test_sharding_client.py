"""Tests of the Python sharding client against the real antdt-sharding-service.

Needs ANTDT_BIN_DIR (the directory of antdt-sharding-service) and the generated
stubs on PYTHONPATH; ctest's python_sdk_test sets both.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple
from unittest import mock

import grpc

from antdt.sharding import FileSlice, LeaseLostError, Shard, ShardingClient, ShardingError
from server_process import ServerProcess

JOB = "job"
RECORDS = 500
SHARD_SIZE = 20
EPOCHS = 2


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Polls ``condition`` until it holds; fails the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)


class Service(ServerProcess):
    """The service binary in a subprocess, on a state dir that outlives restarts."""

    def __init__(self, workdir: str) -> None:
        super().__init__("antdt-sharding-service", workdir)
        self.state_dir = os.path.join(workdir, "state")
        self.address = ""

    def start(self, listen: str = "127.0.0.1:0", timeout_s: float = 30.0,
              extra: Sequence[str] = ()) -> str:
        """Starts the service and waits for its ready file; returns HOST:PORT."""
        lines = self.spawn(["--listen", listen, "--state-dir", self.state_dir,
                            "--lease-ttl", "2s",
                            *([] if "--token-file" in extra else ["--auth", "none"]), *extra],
                           timeout_s)
        self.address = lines[0]
        return self.address


class Commits:
    """Thread-safe collector of on_commit callbacks: epoch -> committed ids."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_epoch: Dict[int, List[int]] = defaultdict(list)

    def __call__(self, epoch: int, record_ids: List[int]) -> None:
        with self._lock:
            self.by_epoch[epoch].extend(record_ids)

    def count(self) -> int:
        with self._lock:
            return sum(len(ids) for ids in self.by_epoch.values())


class ShardingClientTest(unittest.TestCase):
    def setUp(self) -> None:
        self.workdir = tempfile.mkdtemp(prefix="antdt-py-sdk-")
        self.service = Service(self.workdir)
        self.address = self.service.start()
        self.clients: List[ShardingClient] = []

    def tearDown(self) -> None:
        for client in self.clients:
            client.close()
        self.service.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def client(self, dataset: str, worker: str, incarnation: int = 0,
               on_commit: Optional[Callable[[int, List[int]], None]] = None,
               address: Optional[str] = None) -> ShardingClient:
        c = ShardingClient(address or self.address, JOB, dataset, worker,
                           incarnation=incarnation, retry_budget_s=60, on_commit=on_commit)
        self.clients.append(c)
        return c

    def assert_exactly_once(self, commits: Commits) -> None:
        self.assertEqual(sorted(commits.by_epoch), list(range(EPOCHS)))
        for epoch in range(EPOCHS):
            ids = commits.by_epoch[epoch]
            self.assertEqual(len(ids), len(set(ids)), f"epoch {epoch}: a record committed twice")
            self.assertEqual(sorted(ids), list(range(RECORDS)), f"epoch {epoch}: records missing")

    def run_workers(self, workers: Dict[str, ShardingClient], commit_every: int,
                    per_record: Callable[[], None] = lambda: None) -> List[threading.Thread]:
        """Starts one thread per client looping over records(); errors go to self.errors."""
        self.errors: List[BaseException] = []

        def loop(c: ShardingClient) -> None:
            try:
                for _shard, _record in c.records(commit_every=commit_every):
                    per_record()
            except BaseException as e:  # noqa: BLE001  (reported by the main thread)
                self.errors.append(e)

        threads = [threading.Thread(target=loop, args=(c,), name=w, daemon=True)
                   for w, c in workers.items()]
        for t in threads:
            t.start()
        return threads

    def join(self, threads: List[threading.Thread], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for t in threads:
            t.join(max(deadline - time.monotonic(), 0))
            self.assertFalse(t.is_alive(), f"worker {t.name} did not finish in {timeout_s} s")
        if self.errors:
            raise self.errors[0]

    # (a)
    def test_two_workers_commit_every_record_once_per_epoch(self) -> None:
        commits = Commits()
        a = self.client("a", "w0", on_commit=commits)
        b = self.client("a", "w1", on_commit=commits)
        created = a.create_dataset(record_count=RECORDS, shard_size=SHARD_SIZE, epochs=EPOCHS)
        self.assertTrue(created.created)
        self.assertEqual(created.shard_count, RECORDS // SHARD_SIZE)
        # The second worker's create is a no-op confirmation.
        self.assertFalse(b.create_dataset(record_count=RECORDS, shard_size=SHARD_SIZE,
                                          epochs=EPOCHS).created)

        self.join(self.run_workers({"w0": a, "w1": b}, commit_every=7), timeout_s=120)

        self.assert_exactly_once(commits)
        progress = a.progress()
        self.assertTrue(progress.finished)
        self.assertEqual(progress.records_committed_total, RECORDS * EPOCHS)
        self.assertEqual(sorted(w.worker_id for w in progress.workers), ["w0", "w1"])
        self.assertEqual(sum(w.records_committed for w in progress.workers), RECORDS * EPOCHS)
        self.assertIsNone(a.acquire())

    # (b)
    def test_restarted_worker_resumes_its_shard_after_last_commit(self) -> None:
        commits = Commits()
        first = self.client("b", "w0", incarnation=3, on_commit=commits)
        first.create_dataset(record_count=RECORDS, shard_size=SHARD_SIZE, epochs=1)
        shard = first.acquire()
        assert shard is not None
        self.assertEqual((shard.epoch, shard.committed, shard.size), (0, 0, SHARD_SIZE))
        self.assertEqual(shard.record_ids, list(range(shard.start, shard.end)))
        self.assertEqual(first.report(shard, 7), 7)
        self.assertEqual(commits.by_epoch[0], shard.record_ids[:7])

        # The worker "restarts": a new process with a higher incarnation.
        second = self.client("b", "w0", incarnation=4, on_commit=commits)
        resumed = second.acquire()
        assert resumed is not None
        self.assertEqual((resumed.epoch, resumed.index), (shard.epoch, shard.index))
        self.assertNotEqual(resumed.token, shard.token)
        self.assertEqual(resumed.committed, 7)
        self.assertEqual(resumed.size, SHARD_SIZE)
        self.assertEqual(resumed.start, shard.start + 7)
        self.assertEqual(resumed.end, shard.end)
        self.assertEqual(resumed.record_ids, shard.record_ids[7:])

        # The old incarnation is fenced: its lease is gone and it gets no shards.
        with self.assertRaises(LeaseLostError) as lost:
            first.report(shard, 10)
        self.assertEqual(lost.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        with self.assertRaises(ShardingError) as old:
            first.acquire()
        self.assertEqual(old.exception.code, grpc.StatusCode.FAILED_PRECONDITION)

        second.complete(resumed)
        self.assertEqual(sorted(commits.by_epoch[0]), shard.record_ids)

    # (c)
    def test_records_loop_survives_service_crash_and_restart(self) -> None:
        commits = Commits()
        c = self.client("c", "w0", on_commit=commits)
        c.create_dataset(record_count=RECORDS, shard_size=SHARD_SIZE, epochs=EPOCHS)
        port = self.address.rsplit(":", 1)[1]
        threads = self.run_workers({"w0": c}, commit_every=5, per_record=lambda: time.sleep(0.001))

        wait_until(lambda: commits.count() >= 300 or bool(self.errors), 60, "300 commits")
        self.assertFalse(self.errors)
        self.service.kill()
        before = c.retries
        # The client must notice the outage before the service comes back.
        wait_until(lambda: c.retries > before, 30, "the client to retry")
        self.assertEqual(self.service.start(listen=f"127.0.0.1:{port}"), self.address)

        self.join(threads, timeout_s=120)
        self.assertGreater(c.retries, before)
        self.assert_exactly_once(commits)
        self.assertTrue(c.progress().finished)

    def test_records_loop_rides_out_a_graceful_stop(self) -> None:
        # SIGTERM (a pod deleted, a node drained): the stopping service cancels
        # the calls it has not started, and eight workers committing every
        # record retry those too.
        commits = Commits()
        self.client("g", "w0").create_dataset(record_count=RECORDS, shard_size=2, epochs=EPOCHS)
        port = self.address.rsplit(":", 1)[1]
        workers = {f"w{i}": self.client("g", f"w{i}", on_commit=commits) for i in range(8)}
        threads = self.run_workers(workers, commit_every=1)

        wait_until(lambda: commits.count() >= 200 or bool(self.errors), 60, "200 commits")
        self.assertFalse(self.errors)
        self.service.stop()
        self.assertEqual(self.service.start(listen=f"127.0.0.1:{port}"), self.address)

        self.join(threads, timeout_s=120)
        self.assert_exactly_once(commits)

    def test_files_slices_and_shuffled_record_ids(self) -> None:
        files = [("a.rec", 30), ("b.rec", 25)]
        plain = self.client("files", "w0")
        self.assertEqual(plain.create_dataset(files=files, shard_size=20).record_count, 55)
        first, second = plain.acquire(), plain.acquire()
        assert first is not None and second is not None
        self.assertEqual(first.slices, [FileSlice("a.rec", 0, 20)])
        self.assertEqual(second.slices, [FileSlice("a.rec", 20, 10), FileSlice("b.rec", 0, 10)])
        self.assertEqual(second.record_ids, list(range(20, 40)))

        commits = Commits()
        shuffled = self.client("shuffled", "w0", on_commit=commits)
        shuffled.create_dataset(files=files, shard_size=20, epochs=EPOCHS, shuffle=True, seed=7)
        for _shard, _record in shuffled.records(commit_every=3):
            pass
        for epoch in range(EPOCHS):
            self.assertEqual(sorted(commits.by_epoch[epoch]), list(range(55)))
        self.assertNotEqual(commits.by_epoch[0], list(range(55)))

    # (d)
    def test_complete_and_acquire_leases_the_next_shard_in_one_call(self) -> None:
        commits = Commits()
        c = self.client("one", "w0", on_commit=commits)
        c.create_dataset(record_count=30, shard_size=10, epochs=1)
        shard = c.acquire()
        seen = []
        while shard is not None:
            seen.append(shard.index)
            shard = c.complete_and_acquire(shard)
        self.assertEqual(sorted(seen), [0, 1, 2])
        self.assertEqual(sorted(commits.by_epoch[0]), list(range(30)))
        self.assertTrue(c.progress().finished)
        # A lease no longer held (its worker restarted): refused, nothing acquired.
        old = self.client("lost", "w1")
        old.create_dataset(record_count=30, shard_size=10, epochs=1)
        held = old.acquire()
        self.assertIsNotNone(held)
        self.assertIsNotNone(self.client("lost", "w1", incarnation=1).acquire())
        with self.assertRaises(LeaseLostError):
            old.complete_and_acquire(held)
        self.assertEqual(old.progress().shards_doing, 1)

    # (e) the guided layout: a much slower worker's lease ends early
    def test_a_slow_workers_lease_ends_early_and_every_record_is_taken_once(self) -> None:
        records = 3000
        commits = Commits()
        fast = self.client("guided", "fast", on_commit=commits)
        slow = ShardingClient(self.address, JOB, "guided", "slow", retry_budget_s=60,
                              on_commit=commits, follow_shorter_leases=True)
        self.clients.append(slow)
        fast.create_dataset(record_count=records, shard_size=200, min_shard_records=10, workers=2)
        taken: Dict[str, List[Tuple[int, int]]] = {"fast": [], "slow": []}  # (shard, record)
        errors: List[BaseException] = []

        def loop(name: str, c: ShardingClient, per_record_s: float) -> None:
            try:
                for shard, record in c.records(commit_every=5):
                    taken[name].append((shard.index, record))
                    time.sleep(per_record_s)
            except BaseException as e:  # noqa: BLE001  (reported by the main thread)
                errors.append(e)

        # The slow one (20 records a second) first, so that it holds a whole
        # shard when it is seen slow; the fast one (about 20 times faster) then.
        threads = [threading.Thread(target=loop, args=("slow", slow, 0.05), daemon=True)]
        threads[0].start()
        wait_until(lambda: len(taken["slow"]) > 0, 10, "the slow worker's first record")
        threads.append(threading.Thread(target=loop, args=("fast", fast, 0.002), daemon=True))
        threads[1].start()
        for t in threads:
            t.join(120)
            self.assertFalse(t.is_alive(), "a worker did not finish in 120 s")
        if errors:
            raise errors[0]
        # The slow worker was told to stop early and did: no record was taken
        # twice (by it past its new end and again by the other), none missed,
        # and the rest of its first shard went to the fast worker (not back
        # to the slow one, which asks again first).
        self.assertGreaterEqual(slow.leases_shortened, 1)
        everything = [r for _s, r in taken["fast"] + taken["slow"]]
        self.assertEqual(len(everything), len(set(everything)), "a record taken twice")
        self.assertEqual(sorted(everything), list(range(records)))
        self.assertEqual(sorted(commits.by_epoch[0]), list(range(records)))
        first = taken["slow"][0][0]
        self.assertIn(first, {s for s, _r in taken["fast"]},
                      f"the fast worker took none of shard {first}, the slow worker's first")
        self.assertTrue(fast.progress().finished)

    def test_invalid_shard_size_is_refused(self) -> None:
        c = self.client("d", "w0")
        with self.assertRaises(ShardingError) as err:
            c.create_dataset(record_count=RECORDS, shard_size=0)
        self.assertEqual(err.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("spec.shard_size", err.exception.message)
        self.assertEqual(c.retries, 0)



class ShardEndAtTest(unittest.TestCase):
    """What a report that ended the lease early does to the shard (no service)."""

    def shard(self, shuffled: bool) -> Shard:
        # Acquired from the shard's 10th record (of 100); 20 committed since.
        ids = [1000 + i for i in range(90)] if shuffled else list(range(110, 200))
        return Shard(epoch=0, index=1, token=7, committed=10, size=100, start=110, end=200,
                     record_ids=ids, slices=[FileSlice("a.rec", 110, 50), FileSlice("b.rec", 0, 40)],
                     acked=20, lease_end=100)

    def test_the_lease_stops_where_the_service_said(self) -> None:
        for shuffled in (False, True):
            with self.subTest(shuffled=shuffled):
                s = self.shard(shuffled)
                for ignored in (150, 100, 15, 0):  # past it, at it, before what was committed, unsaid
                    s.end_at(ignored)
                    self.assertEqual((s.lease_end, len(s.record_ids)), (100, 90))
                s.end_at(40)
                self.assertEqual(s.lease_end, 40)
                self.assertEqual(len(s.record_ids), 30)
                self.assertEqual(s.record_ids[-1], 1029 if shuffled else 139)
                self.assertEqual(s.end, 140)
                self.assertEqual(s.slices, [FileSlice("a.rec", 110, 30)])
                s.end_at(60)  # never longer again
                self.assertEqual(s.lease_end, 40)
                s.end_at(20)  # down to what was committed (positions 10..19 of the shard)
                self.assertEqual((s.lease_end, len(s.record_ids), s.end), (20, 10, 120))
                self.assertEqual(s.slices, [FileSlice("a.rec", 110, 10)])


class ShardingClientCredentialTest(unittest.TestCase):
    """A service holding the job's token: the client sends the one its environment names
    ($ANTDT_TOKEN_FILE, as the local runner sets it) with no code for it; without it, or with
    another, the call is refused at once and not retried."""

    def setUp(self) -> None:
        self.workdir = tempfile.mkdtemp(prefix="antdt-py-auth-")
        self.addCleanup(shutil.rmtree, self.workdir, True)
        self.token_file = os.path.join(self.workdir, "token")
        with open(self.token_file, "w") as f:
            f.write("py-job-token-0123456789\n")
        self.service = Service(self.workdir)
        self.addCleanup(self.service.kill)
        self.address = self.service.start(extra=["--token-file", self.token_file])

    def client(self, env: Dict[str, str], **kwargs: Any) -> ShardingClient:
        with mock.patch.dict(os.environ, env, clear=True):
            c = ShardingClient(self.address, JOB, "d", "w0", retry_budget_s=10, **kwargs)
        self.addCleanup(c.close)
        return c

    def test_the_token_from_the_environment_is_sent(self) -> None:
        commits = Commits()
        c = self.client({"ANTDT_TOKEN_FILE": self.token_file})
        c.on_commit = commits
        c.create_dataset(record_count=100, shard_size=10, epochs=1)
        for _shard, _record in c.records(commit_every=5):
            pass
        self.assertEqual(commits.count(), 100)

    def test_no_token_or_another_is_refused_naming_the_variables(self) -> None:
        for env, kwargs, code in (({}, {}, grpc.StatusCode.UNAUTHENTICATED),
                                  ({"ANTDT_TOKEN": "another-jobs"}, {}, grpc.StatusCode.PERMISSION_DENIED),
                                  ({}, {"token": "another-jobs"}, grpc.StatusCode.PERMISSION_DENIED)):
            with self.subTest(env=env, kwargs=kwargs):
                c = self.client(env, **kwargs)
                with self.assertRaises(ShardingError) as err:
                    c.create_dataset(record_count=100, shard_size=10, epochs=1)
                self.assertEqual(err.exception.code, code)
                self.assertEqual(c.retries, 0)
                if code == grpc.StatusCode.UNAUTHENTICATED:
                    self.assertIn("$ANTDT_TOKEN", str(err.exception))

    def test_an_unreadable_token_file_is_an_error_naming_it(self) -> None:
        with self.assertRaisesRegex(ValueError, "^ANTDT_TOKEN_FILE: cannot read .*missing"):
            self.client({"ANTDT_TOKEN_FILE": os.path.join(self.workdir, "missing")})

    def test_a_bad_token_is_an_error_naming_where_it_came_from(self) -> None:
        """Checked as the services check theirs: blank, oversized, multi-line or non-ASCII
        tokens are errors naming the variable (never the token), not "no token"."""
        for value, want in (("   ", "is blank"), ("x" * 5000, "holds more than 4096 bytes"),
                            ("two\nlines", "holds other than visible ASCII"),
                            ("caf\u00e9", "holds other than visible ASCII")):
            with self.subTest(want=want):
                with self.assertRaisesRegex(ValueError, r"^\$ANTDT_TOKEN " + want):
                    self.client({"ANTDT_TOKEN": value})


class ShardingClientTlsTest(unittest.TestCase):
    """A service on TLS (certificates from scripts/make-certs.sh): the client speaks TLS when its
    environment names a CA ($ANTDT_TLS_*, as the operator's pods get them), with no code for it;
    without TLS it gets nothing; bad files are errors naming the variable."""

    def setUp(self) -> None:
        self.workdir = tempfile.mkdtemp(prefix="antdt-py-tls-")
        self.addCleanup(shutil.rmtree, self.workdir, True)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "make-certs.sh")
        self.tls = os.path.join(self.workdir, "tls")
        subprocess.run([script, self.tls], check=True, stdout=subprocess.DEVNULL)
        self.service = Service(self.workdir)
        self.addCleanup(self.service.kill)
        self.address = self.service.start(extra=[
            "--tls-cert", os.path.join(self.tls, "server.crt"),
            "--tls-key", os.path.join(self.tls, "server.key"),
            "--tls-ca", os.path.join(self.tls, "ca.crt")])

    def client(self, env: Dict[str, str], **kwargs: Any) -> ShardingClient:
        with mock.patch.dict(os.environ, env, clear=True):
            c = ShardingClient(self.address, JOB, "d", "w0", **kwargs)
        self.addCleanup(c.close)
        return c

    def test_the_environments_tls_is_used(self) -> None:
        commits = Commits()
        c = self.client({"ANTDT_TLS_CA": os.path.join(self.tls, "ca.crt"),
                         "ANTDT_TLS_SERVER_NAME": "antdt.internal"}, retry_budget_s=10)
        c.on_commit = commits
        c.create_dataset(record_count=100, shard_size=10, epochs=1)
        for _shard, _record in c.records(commit_every=5):
            pass
        self.assertEqual(commits.count(), 100)

    def test_plaintext_or_another_name_gets_nothing(self) -> None:
        for env in ({}, {"ANTDT_TLS_CA": os.path.join(self.tls, "ca.crt"),
                         "ANTDT_TLS_SERVER_NAME": "someone-else.internal"}):
            with self.subTest(env=env):
                c = self.client(env, retry_budget_s=0.5)
                with self.assertRaises(ShardingError) as err:
                    c.create_dataset(record_count=100, shard_size=10, epochs=1)
                self.assertEqual(err.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_bad_files_are_errors_naming_the_variable(self) -> None:
        key = os.path.join(self.tls, "server.key")
        cases = (({"ANTDT_TLS_CA": os.path.join(self.workdir, "missing")}, "^ANTDT_TLS_CA: cannot read .*missing"),
                 ({"ANTDT_TLS_CA": key}, "^ANTDT_TLS_CA: .* is not a PEM CA certificate"),
                 ({"ANTDT_TLS_CERT": os.path.join(self.tls, "server.crt")}, "^ANTDT_TLS_KEY: must be set"))
        for env, pattern in cases:
            with self.subTest(env=env):
                with self.assertRaisesRegex(ValueError, pattern) as err:
                    self.client(env)
                self.assertNotIn("PRIVATE", str(err.exception))


class ShardingClientFromEnvTest(unittest.TestCase):
    """from_env() reads what the operator and the local runner set; nothing is called."""

    ENV = {"ANTDT_SHARDING_ADDR": "127.0.0.1:7070", "ANTDT_JOB": JOB, "ANTDT_DATASET": "eval",
           "ANTDT_WORKER_ID": "worker-3", "ANTDT_INCARNATION": "2"}

    def from_env(self, env: Dict[str, str], **overrides: Any) -> ShardingClient:
        with mock.patch.dict(os.environ, env, clear=True):
            client = ShardingClient.from_env(**overrides)
        self.addCleanup(client.close)
        return client

    def settings(self, c: ShardingClient) -> tuple:
        return (c.address, c.job, c.dataset, c.worker_id, c.incarnation)

    def test_reads_every_variable(self) -> None:
        c = self.from_env(self.ENV)
        self.assertEqual(self.settings(c), ("127.0.0.1:7070", JOB, "eval", "worker-3", 2))

    def test_dataset_and_incarnation_have_defaults(self) -> None:
        env = {k: v for k, v in self.ENV.items() if k not in ("ANTDT_DATASET", "ANTDT_INCARNATION")}
        c = self.from_env(env)
        self.assertEqual((c.dataset, c.incarnation), ("train", 0))

    def test_overrides_win_and_need_no_variable(self) -> None:
        env = {k: v for k, v in self.ENV.items() if k != "ANTDT_SHARDING_ADDR"}
        c = self.from_env(env, address="127.0.0.1:1", incarnation=5, retry_budget_s=3.0)
        self.assertEqual(self.settings(c), ("127.0.0.1:1", JOB, "eval", "worker-3", 5))
        self.assertEqual(c.retry_budget_s, 3.0)

    def test_missing_or_malformed_variable_raises_naming_it(self) -> None:
        cases = [(name, None) for name in ("ANTDT_SHARDING_ADDR", "ANTDT_JOB", "ANTDT_WORKER_ID")]
        cases += [("ANTDT_INCARNATION", bad) for bad in ("two", "-1", "1.5")]
        for variable, value in cases:
            env = {k: v for k, v in self.ENV.items() if k != variable}
            if value is not None:
                env[variable] = value
            with self.subTest(variable=variable, value=value):
                with self.assertRaisesRegex(ValueError, f"^{variable}: "):
                    self.from_env(env)


if __name__ == "__main__":
    unittest.main()
