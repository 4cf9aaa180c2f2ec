"""The environment the operator and the local runner give every worker
(``docs/kubernetes.md``), read where an SDK argument is left out.

A variable set to the empty string counts as not set.
"""

from __future__ import annotations

import os
from typing import Optional

#: The job's name.
JOB = "ANTDT_JOB"
#: The job's Kubernetes namespace.
NAMESPACE = "ANTDT_NAMESPACE"
#: This worker's stable id.
WORKER_ID = "ANTDT_WORKER_ID"


def first_set(*variables: str) -> Optional[str]:
    """The value of the first of ``variables`` that is set, or None."""
    for variable in variables:
        value = os.environ.get(variable)
        if value:
            return value
    return None


def given_or_env(argument: str, value: Optional[str], *variables: str) -> str:
    """``value`` when given (not None), else the first of ``variables`` set.

    Raises:
        ValueError: ``value`` is None and none of ``variables`` is set; the
            message starts with ``argument`` and names the variables.
    """
    if value is not None:
        return value
    found = first_set(*variables)
    if found is None:
        if len(variables) == 1:
            unset = f"${variables[0]} is not set"
        else:
            unset = "neither " + " nor ".join(f"${v}" for v in variables) + " is set"
        raise ValueError(f"{argument}: not given and {unset}")
    return found


def required(variable: str) -> str:
    """The value of ``variable``, or ValueError naming it when it is not set."""
    value = first_set(variable)
    if value is None:
        raise ValueError(f"{variable}: must be set")
    return value


def count(variable: str, default: int) -> int:
    """``variable`` as an integer >= 0 (``default`` when not set), or
    ValueError naming it when it is not one."""
    raw = first_set(variable)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{variable}: must be an integer >= 0, got {raw!r}")
    return value
