"""The queries of AntDT's Grafana dashboards, with their variables substituted.

`panel_queries(path, namespace, job)` is the interface for tests that run the
dashboards' queries against a real Prometheus: every panel target's PromQL,
with `$namespace` and `$job` set to a job's and Grafana's built-ins
(`$__rate_interval`, `$__interval`, `$__range`, ...) set to fixed durations.

`dashboard_queries(dashboard)` lists every query of a dashboard as written
(panel targets, Prometheus annotations, query variables), for the validator
(tests/validate_dashboards.py). Standard library only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterator

# Grafana's variable syntaxes: $name, ${name}, ${name:format}, ${name.field},
# [[name]], [[name:format]]. A name starts with a letter or `_`, so the `$1`
# of label_replace is not a variable.
VARIABLE_RE = re.compile(
    r"\$\{([A-Za-z_]\w*)(?:\.[^:}]*)?(?::[^}]*)?\}"
    r"|\[\[([A-Za-z_]\w*)(?::[^\]]*)?\]\]"
    r"|\$([A-Za-z_]\w*)")

# Grafana's global variables that a dashboard may use without declaring them,
# and the value each takes when a query is evaluated outside Grafana. None:
# allowed by Grafana but not in PromQL (left as is, so the query does not parse).
BUILTIN_VALUES: dict[str, str | None] = {
    "__rate_interval": "1m",
    "__rate_interval_ms": "60000",
    "__interval": "30s",
    "__interval_ms": "30000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
    "__from": "0",
    "__to": "3600000",
    "__dashboard": "dashboard",
    "__org": "1",
    "__user": "user",
    "__timeFilter": None,
}


@dataclass(frozen=True)
class Query:
    """One query of a dashboard, as written in its JSON."""

    where: str  # 'panel "Title" (id 3) target A', 'annotation "Actions"', 'variable job'
    title: str  # the panel's title, the annotation's name or the variable's name
    kind: str  # "panel", "annotation" or "variable"
    expr: str  # PromQL; for a label_values(...) variable, its series selector


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def iter_panels(dashboard: dict) -> Iterator[dict]:
    """Every panel, rows' nested panels (collapsed rows) included."""
    for panel in dashboard.get("panels") or []:
        if not isinstance(panel, dict):
            continue
        yield panel
        yield from (p for p in panel.get("panels") or [] if isinstance(p, dict))


def variable_expr(query: object) -> str | None:
    """The PromQL of a Prometheus query variable: label_values(SELECTOR, label)
    gives SELECTOR, query_result(EXPR) gives EXPR; None when there is none
    (label_names(), metrics(...), label_values(label))."""
    if isinstance(query, dict):
        query = query.get("query")
    if not isinstance(query, str):
        return None
    query = query.strip()
    m = re.fullmatch(r"label_values\((.*),\s*[A-Za-z_]\w*\s*\)", query, re.S)
    if m:
        return m.group(1).strip()
    m = re.fullmatch(r"query_result\((.*)\)", query, re.S)
    if m:
        return m.group(1).strip()
    return None


def dashboard_queries(dashboard: dict) -> list[Query]:
    """Every PromQL query of the dashboard, unsubstituted."""
    out: list[Query] = []
    for panel in iter_panels(dashboard):
        title = str(panel.get("title", ""))
        for target in panel.get("targets") or []:
            if isinstance(target, dict) and isinstance(target.get("expr"), str):
                where = f'panel "{title}" (id {panel.get("id")}) target {target.get("refId")}'
                out.append(Query(where, title, "panel", target["expr"]))
    for annotation in (dashboard.get("annotations") or {}).get("list") or []:
        if not isinstance(annotation, dict):
            continue
        target = annotation.get("target") if isinstance(annotation.get("target"), dict) else {}
        expr = annotation.get("expr", target.get("expr"))
        if isinstance(expr, str):
            name = str(annotation.get("name", ""))
            out.append(Query(f'annotation "{name}"', name, "annotation", expr))
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        if isinstance(variable, dict) and variable.get("type") == "query":
            expr = variable_expr(variable.get("query"))
            if expr is not None:
                name = str(variable.get("name", ""))
                out.append(Query(f"variable {name}", name, "variable", expr))
    return out


def variables_of(text: str) -> list[str]:
    """The variable names `text` refers to, in order."""
    return [next(g for g in m.groups() if g) for m in VARIABLE_RE.finditer(text)]


def substitute(text: str, values: dict[str, str | None]) -> str:
    """`text` with every variable in `values` (value not None) replaced; the
    others are left as written."""

    def one(m: re.Match) -> str:
        value = values.get(next(g for g in m.groups() if g))
        return m.group(0) if value is None else value

    return VARIABLE_RE.sub(one, text)


def values_for(dashboard: dict, namespace: str, job: str) -> dict[str, str | None]:
    """The value of every variable the dashboard may use: Grafana's built-ins,
    `namespace` and `job`, and any other dashboard variable's current value."""
    values: dict[str, str | None] = dict(BUILTIN_VALUES)
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        if not isinstance(variable, dict) or "name" not in variable:
            continue
        current = (variable.get("current") or {}).get("value")
        if isinstance(current, list):
            current = current[0] if current else None
        values[variable["name"]] = current if isinstance(current, str) else None
    values["namespace"] = namespace
    values["job"] = job
    return values


def panel_queries(path: str, namespace: str, job: str) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every panel target of the dashboard at `path`,
    in panel order, with `$namespace`, `$job` and Grafana's built-ins
    substituted. Raises ValueError when a query uses a variable without a value."""
    dashboard = load(path)
    values = values_for(dashboard, namespace, job)
    out: list[tuple[str, str]] = []
    for query in dashboard_queries(dashboard):
        if query.kind != "panel":
            continue
        expr = substitute(query.expr, values)
        left = variables_of(expr)
        if left:
            raise ValueError(f"{path}: {query.where}: no value for ${left[0]}")
        out.append((query.title, expr))
    return out
