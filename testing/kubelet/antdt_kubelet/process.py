"""Child processes in their own process group, which die with the kubelet even if it is SIGKILLed."""

import ctypes
import os
import signal
import subprocess
import time

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _child_setup(cgroup_procs=None):
    # Runs between fork and exec: no imports, no locks. The kubelet forks from its main thread only,
    # which lives as long as the process, so the parent-death signal fires when the kubelet dies.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if cgroup_procs:
        # Into the node's cgroup before exec: the container never runs outside it. A failure fails
        # the spawn (the exception reaches the parent), not a container running uncapped.
        fd = os.open(cgroup_procs, os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)


def spawn(argv, cwd, env, log_path, cgroup_procs=None):
    """Starts argv as the leader of a new session / process group, output appended to log_path;
    with cgroup_procs (a cgroup's cgroup.procs), in that cgroup."""
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log_file,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=lambda: _child_setup(cgroup_procs))


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
