"""Model checkpoints that agree with the sharding service's state.

:meth:`Session.run <antdt.torch.session.Session.run>` saves a checkpoint only
right after a step's records were committed, so the model in the file has
trained on exactly the records the service had acknowledged at that moment;
the file records that count (``committed``). A job that restarts every rank
restores the model from here and the service hands out the records not yet
committed. Records committed after the checkpoint (when ranks died between two
checkpoints) are not in the restored model: :func:`load` says how many, from
the service's progress, rather than hiding it.

The file is written to a temporary name and renamed, so a rank killed while
saving leaves the previous checkpoint whole.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Optional

import torch

__all__ = ["load", "save"]

_log = logging.getLogger(__name__)


def save(path: str, module: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int,
         client: Any = None, expected_committed: int = -1, wait_s: float = 10.0) -> None:
    """Saves the model, the optimizer and ``step`` (with the service's committed
    count when ``client`` is given) atomically at ``path``. With
    ``expected_committed`` (the records the model trained on, every rank's),
    first waits up to ``wait_s`` until the service counts that many: each rank
    commits its part of a step on its own, so the count read at once can miss
    another rank's last records."""
    committed = -1
    if client is not None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                committed = int(client.progress().records_committed_total)
            except Exception as e:  # noqa: BLE001 (the count is informative)
                _log.warning("checkpoint at step %d: no committed count: %s", step, e)
                break
            if committed >= expected_committed or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if 0 <= committed < expected_committed:
            _log.warning("checkpoint at step %d: %d records committed, %d trained on",
                         step, committed, expected_committed)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    torch.save({"model": module.state_dict(), "optimizer": optimizer.state_dict(),
                "step": step, "committed": committed}, tmp)
    os.replace(tmp, path)


def load(path: str, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
         client: Any = None) -> Optional[int]:
    """Restores a checkpoint saved by :func:`save`; its step, or None when
    there is no file. With ``client``, warns of records committed after it."""
    if not os.path.exists(path):
        return None
    state = torch.load(path, map_location="cpu")
    module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if client is not None and state.get("committed", -1) >= 0:
        now = int(client.progress().records_committed_total)
        if now > state["committed"]:
            _log.warning("checkpoint of step %d: %d records were committed after it and are "
                         "not in the restored model", state["step"], now - state["committed"])
    return int(state["step"])
