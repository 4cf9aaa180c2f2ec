"""Child processes in their own process group, which die with the kubelet even if it is SIGKILLed."""

import ctypes
import os
import signal
import subprocess
import time

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _child_setup():
    # Runs between fork and exec: no imports, no locks. The kubelet forks from its main thread only,
    # which lives as long as the process, so the parent-death signal fires when the kubelet dies.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(argv, cwd, env, log_path):
    """Starts argv as the leader of a new session / process group, output appended to log_path."""
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log_file,
                                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_child_setup)


def signal_group(proc, sig):
    """Signals the whole process group led by proc (it may outlive its leader)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def exit_code(proc):
    """Kubernetes' view of the exit: a signal N reads as 128 + N."""
    code = proc.returncode
    return 128 - code if code < 0 else code


def stop_all(procs, grace_s):
    """SIGTERM every group, wait up to grace_s for the leaders, then SIGKILL every group."""
    procs = [p for p in procs if p is not None]
    for p in procs:
        signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        signal_group(p, signal.SIGKILL)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
