"""A project binary in a subprocess, started and waited for through its ready
file: shared by the SDK tests."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import unittest
from typing import List, Optional


class ServerProcess:
    """``$ANTDT_BIN_DIR/<name>`` with a ready file and a log in ``workdir``."""

    def __init__(self, name: str, workdir: str) -> None:
        bin_dir = os.environ.get("ANTDT_BIN_DIR")
        if not bin_dir:
            raise unittest.SkipTest("ANTDT_BIN_DIR is not set")
        self.binary = os.path.join(bin_dir, name)
        if not os.access(self.binary, os.X_OK):
            raise unittest.SkipTest(f"{self.binary} is not built")
        self.name = name
        self.workdir = workdir
        self.ready_file = os.path.join(workdir, "ready")
        self.log_path = os.path.join(workdir, name + ".log")
        self.proc: Optional[subprocess.Popen] = None

    def spawn(self, args: List[str], timeout_s: float = 30.0) -> List[str]:
        """Runs the binary with ``args`` plus --ready-file; returns the ready
        file's non-empty lines once it is written (atomically, once serving)."""
        if os.path.exists(self.ready_file):
            os.remove(self.ready_file)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, *args, "--ready-file", self.ready_file],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while True:
            if os.path.exists(self.ready_file):
                with open(self.ready_file) as f:
                    lines = [line.strip() for line in f if line.strip()]
                if lines:
                    return lines
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not ready after {timeout_s} s:\n{self.log()}")
            time.sleep(0.01)

    def kill(self) -> None:
        """SIGKILLs the process (a crash) and reaps it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None

    def stop(self) -> None:
        """SIGTERMs the process (SIGKILL if it lingers) and reaps it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""
