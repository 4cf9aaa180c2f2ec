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


#: The job's credential (a bearer token), or the file holding it.
TOKEN = "ANTDT_TOKEN"
TOKEN_FILE = "ANTDT_TOKEN_FILE"


def token() -> Optional[str]:
    """``$ANTDT_TOKEN``, else the content of the file ``$ANTDT_TOKEN_FILE``
    names (surrounding whitespace stripped), else None.

    Raises:
        ValueError: the file cannot be read or is empty; the message starts
            with ``ANTDT_TOKEN_FILE`` and names the path, never the content.
    """
    value = first_set(TOKEN)
    if value is not None:
        return value.strip()
    path = first_set(TOKEN_FILE)
    if path is None:
        return None
    try:
        with open(path, encoding="ascii") as f:
            content = f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{TOKEN_FILE}: cannot read {path}: {e.__class__.__name__}") from None
    if not content:
        raise ValueError(f"{TOKEN_FILE}: {path} is empty")
    return content


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
