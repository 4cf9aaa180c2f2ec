#!/usr/bin/python3
"""Validates AntDT's Grafana dashboards (deploy/helm/antdt/dashboards/*.json).

Each dashboard must
1. have the shape of Grafana's dashboard schema (the required fields and types
   of @grafana/schema 13.2.3's Dashboard, Panel, RowPanel, GridPos,
   VariableModel, AnnotationQuery and FieldConfigSource; that package ships
   TypeScript types only, no JSON schema, so the shape is written here), plus
   what a provisioned AntDT dashboard needs: uid, title, panels with id, type,
   gridPos and targets, a 24-column grid, unique panel ids and refIds;
2. query only the `${datasource}` variable's Prometheus (the built-in
   `-- Grafana --` annotation aside);
3. use no variable it does not declare (Grafana's built-ins aside) in a query,
   title, description, legend or annotation text;
4. have every PromQL query parse: with the variables substituted, every query
   becomes a recording rule of a temporary rule file for `promtool check rules`;
5. use only metric names AntDT exports: the string literals "antdt_..." of the
   C++ sources of services/, core/ and backends/ (histograms with
   their _bucket, _sum and _count), the recording rules of
   deploy/prometheus/antdt-rules.yaml, and the series Prometheus adds to every
   scrape (up, scrape_*). Read at run time, so a new metric needs no edit here.

    validate_dashboards.py [DASHBOARD.json ...]   every dashboard of the folder by default
    validate_dashboards.py --self-test            each of the five faults, planted in a
                                                  copy of each dashboard, is caught

Exit status 0 when valid, 1 otherwise; every problem is printed as
`FILE: WHERE: CHECK: MESSAGE`. Needs promtool (Debian's prometheus).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

HERE = os.path.dirname(os.path.realpath(__file__))
DASHBOARDS = os.path.dirname(HERE)
REPO = os.path.abspath(os.path.join(DASHBOARDS, "..", "..", "..", ".."))
sys.path.insert(0, DASHBOARDS)
sys.dont_write_bytecode = True

import queries  # noqa: E402  (deploy/helm/antdt/dashboards/queries.py)
import yaml  # noqa: E402

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRAFANA_BUILTIN_DATASOURCE_UIDS = {"-- Grafana --", "grafana"}
# Series Prometheus itself adds to every scrape of an AntDT endpoint.
SCRAPE_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                 "scrape_samples_post_metric_relabeling", "scrape_series_added"}
METRIC_SOURCES = ("services", "core", "backends")
# Values of the dashboards' own variables when a query is checked.
CHECK_NAMESPACE, CHECK_JOB = "default", "quickstart"


@dataclass(frozen=True)
class Problem:
    check: str  # "schema", "datasource", "variable", "promql" or "metric"
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.check}: {self.message}"


# ---- 1. Grafana's dashboard schema ------------------------------------------------
# A shape is a Python type (or tuple of types), a set of allowed values, a
# list [shape] of items, or a dict {"field": shape, "field?": shape} where "?"
# marks an optional field; a dict with "*" accepts other fields as they are.

NUMBER = (int, float)
DATASOURCE_REF = {"type?": str, "uid?": str}
GRID_POS = {"h": int, "w": int, "x": int, "y": int, "static?": bool}
THRESHOLDS = {"mode": {"absolute", "percentage"},
              "steps": [{"color": str, "value": (int, float, type(None)), "*": True}]}
VALUE_MAPPING = {"type": {"value", "range", "regex", "special"}, "options": dict}
FIELD_CONFIG = {"*": True, "custom?": dict, "mappings?": [VALUE_MAPPING], "unit?": str,
                "thresholds?": THRESHOLDS, "color?": {"mode": str, "*": True},
                "links?": list, "min?": NUMBER, "max?": NUMBER, "decimals?": int,
                "displayName?": str, "noValue?": str}
FIELD_CONFIG_SOURCE = {
    "defaults": FIELD_CONFIG,
    "overrides": [{"matcher": {"id": str, "options?": object, "*": True},
                   "properties": [{"id": str, "value?": object}]}],
}
TRANSFORMATION = {"id": str, "options": object, "disabled?": bool, "filter?": dict,
                  "topic?": {"series", "annotations", "alertStates"}}
PANEL = {
    "type": str, "id": int, "title": str, "gridPos": GRID_POS, "targets": [dict],
    "autoMigrateFrom?": str, "cacheTimeout?": str, "datasource?": DATASOURCE_REF,
    "description?": str, "fieldConfig?": FIELD_CONFIG_SOURCE, "hideTimeOverride?": bool,
    "interval?": str, "libraryPanel?": dict, "links?": list, "maxDataPoints?": NUMBER,
    "maxPerRow?": int, "options?": dict, "pluginVersion?": str, "queryCachingTTL?": int,
    "repeat?": str, "repeatDirection?": {"h", "v"}, "timeCompare?": str, "timeFrom?": str,
    "timeShift?": str, "transformations?": [TRANSFORMATION], "transparent?": bool,
}
ROW_PANEL = {"type": {"row"}, "id": int, "collapsed": bool, "gridPos": GRID_POS,
             "panels": [PANEL], "title?": str, "datasource?": DATASOURCE_REF,
             "repeat?": str}
VARIABLE = {
    "*": True, "name": str,
    "type": {"query", "adhoc", "groupby", "constant", "datasource", "interval", "textbox",
             "custom", "system", "snapshot", "switch"},
    "datasource?": DATASOURCE_REF, "hide?": {0, 1, 2, 3}, "refresh?": {0, 1, 2},
    "sort?": {0, 1, 2, 3, 4, 5, 6, 7, 8}, "multi?": bool, "includeAll?": bool,
    "label?": str, "description?": str, "query?": (str, dict), "regex?": str,
    "current?": dict, "options?": list, "skipUrlSync?": bool, "allValue?": str,
}
ANNOTATION = {"*": True, "name": str, "enable": bool, "iconColor": str,
              "datasource": DATASOURCE_REF, "hide?": bool, "builtIn?": int}
DASHBOARD = {
    "title": str, "uid": str, "schemaVersion": int, "panels": [object],
    "templating": {"list": [VARIABLE]},
    "annotations?": {"list": [ANNOTATION]}, "description?": str, "editable?": bool,
    "fiscalYearStartMonth?": int, "gnetId?": (int, str, type(None)),
    "graphTooltip?": {0, 1, 2}, "id?": (int, type(None)), "links?": list, "liveNow?": bool,
    "preload?": bool, "refresh?": str, "revision?": int, "snapshot?": dict, "tags?": [str],
    "time?": {"from": str, "to": str}, "timepicker?": dict, "timezone?": str,
    "version?": int, "weekStart?": str,
}
# Panel types of a stock Grafana (core panel plugins).
PANEL_TYPES = {"timeseries", "stat", "gauge", "bargauge", "barchart", "table", "heatmap",
               "state-timeline", "status-history", "histogram", "piechart", "text",
               "logs", "news", "dashlist", "alertlist", "annolist", "nodeGraph", "trend",
               "xychart", "candlestick", "canvas", "flamegraph", "traces", "geomap"}
MIN_SCHEMA_VERSION = 36  # Grafana 9.0: every panel and target carries a datasource ref


def check_shape(value: object, shape: object, where: str, out: list[Problem]) -> None:
    def bad(message: str) -> None:
        out.append(Problem("schema", where, message))

    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return bad(f"must be an object, got {type(value).__name__}")
        fields = {k.rstrip("?"): k.endswith("?") for k in shape if k != "*"}
        for name, optional in fields.items():
            if name in value:
                check_shape(value[name], shape[name + ("?" if optional else "")],
                            f"{where}.{name}", out)
            elif not optional:
                bad(f"missing required field {name!r}")
        if not shape.get("*"):
            for name in sorted(set(value) - set(fields)):
                bad(f"unknown field {name!r}")
    elif isinstance(shape, list):
        if not isinstance(value, list):
            return bad(f"must be an array, got {type(value).__name__}")
        for i, item in enumerate(value):
            check_shape(item, shape[0], f"{where}[{i}]", out)
    elif isinstance(shape, set):
        if isinstance(value, bool) or value not in shape:
            bad(f"must be one of {sorted(shape, key=str)}, got {value!r}")
    elif shape is not object:
        # bool is an int in Python; JSON keeps them apart.
        types = shape if isinstance(shape, tuple) else (shape,)
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            names = "/".join(t.__name__ for t in types)
            bad(f"must be {names}, got {type(value).__name__} {value!r}")


def panel_where(panel: dict) -> str:
    return f'panel "{panel.get("title", "")}" (id {panel.get("id")})'


def check_schema(dashboard: object) -> list[Problem]:
    out: list[Problem] = []
    check_shape(dashboard, DASHBOARD, "dashboard", out)
    if not isinstance(dashboard, dict):
        return out
    if isinstance(dashboard.get("schemaVersion"), int) and \
            dashboard["schemaVersion"] < MIN_SCHEMA_VERSION:
        out.append(Problem("schema", "dashboard.schemaVersion",
                           f"{dashboard['schemaVersion']} is older than Grafana 9 "
                           f"({MIN_SCHEMA_VERSION})"))
    ids: dict[int, str] = {}
    for i, panel in enumerate(dashboard.get("panels") or []):
        where = f"dashboard.panels[{i}]"
        if not isinstance(panel, dict):
            out.append(Problem("schema", where, "must be an object"))
            continue
        check_shape(panel, ROW_PANEL if panel.get("type") == "row" else PANEL, where, out)
    for panel in queries.iter_panels(dashboard):
        where = panel_where(panel)
        if panel.get("type") not in PANEL_TYPES | {"row"}:
            out.append(Problem("schema", where, f"unknown panel type {panel.get('type')!r}"))
        pid = panel.get("id")
        if isinstance(pid, int):
            if pid in ids:
                out.append(Problem("schema", where, f"id {pid} is also {ids[pid]}'s"))
            ids[pid] = where
        pos = panel.get("gridPos")
        if isinstance(pos, dict) and all(isinstance(pos.get(k), int) for k in "hwxy"):
            if pos["w"] < 1 or pos["h"] < 1 or pos["x"] < 0 or pos["y"] < 0 \
                    or pos["x"] + pos["w"] > 24:
                out.append(Problem("schema", where,
                                   f"gridPos {pos} is outside the 24-column grid"))
        refs = [t.get("refId") for t in panel.get("targets") or [] if isinstance(t, dict)]
        for ref in refs:
            if not isinstance(ref, str) or not ref:
                out.append(Problem("schema", where, "a target has no refId"))
            elif refs.count(ref) > 1:
                out.append(Problem("schema", where, f"refId {ref!r} is used twice"))
                break
    names = [v.get("name") for v in (dashboard.get("templating") or {}).get("list") or []
             if isinstance(v, dict)]
    for name in sorted({n for n in names if names.count(n) > 1}, key=str):
        out.append(Problem("schema", f"variable {name}", "declared twice"))
    return out


# ---- 2. data sources ----------------------------------------------------------


def check_datasources(dashboard: dict) -> list[Problem]:
    out: list[Problem] = []

    def expect(ref: object, where: str, builtin_ok: bool = False) -> None:
        if ref == DATASOURCE:
            return
        if builtin_ok and isinstance(ref, dict) and \
                ref.get("uid") in GRAFANA_BUILTIN_DATASOURCE_UIDS:
            return
        out.append(Problem("datasource", where,
                           f"must be {json.dumps(DATASOURCE)}, got {json.dumps(ref)}"))

    for panel in queries.iter_panels(dashboard):
        if panel.get("type") == "row":
            continue
        where = panel_where(panel)
        expect(panel.get("datasource"), where)
        for target in panel.get("targets") or []:
            if isinstance(target, dict):
                expect(target.get("datasource"), f"{where} target {target.get('refId')}")
    for annotation in (dashboard.get("annotations") or {}).get("list") or []:
        if isinstance(annotation, dict):
            expect(annotation.get("datasource"), f'annotation "{annotation.get("name")}"',
                   builtin_ok=bool(annotation.get("builtIn")))
    variables = [v for v in (dashboard.get("templating") or {}).get("list") or []
                 if isinstance(v, dict)]
    for variable in variables:
        if variable.get("type") == "query":
            expect(variable.get("datasource"), f"variable {variable.get('name')}")
    if not any(v.get("name") == "datasource" and v.get("type") == "datasource"
               and v.get("query") == "prometheus" for v in variables):
        out.append(Problem("datasource", "templating",
                           "no variable `datasource` of type datasource, query prometheus"))
    return out


# ---- 3. variables -------------------------------------------------------------


def texts(dashboard: dict) -> list[tuple[str, str]]:
    """(where, text) of everything Grafana interpolates that a reader sees or
    queries: titles, descriptions, queries, legends, annotation texts."""
    out = [("dashboard title", dashboard.get("title"))]
    for panel in queries.iter_panels(dashboard):
        where = panel_where(panel)
        out += [(f"{where} title", panel.get("title")),
                (f"{where} description", panel.get("description"))]
        for target in panel.get("targets") or []:
            if isinstance(target, dict):
                ref = f"{where} target {target.get('refId')}"
                out += [(ref, target.get("expr")), (f"{ref} legend", target.get("legendFormat"))]
    for annotation in (dashboard.get("annotations") or {}).get("list") or []:
        if isinstance(annotation, dict):
            where = f'annotation "{annotation.get("name")}"'
            for key in ("expr", "titleFormat", "textFormat", "tagKeys"):
                out.append((f"{where} {key}", annotation.get(key)))
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        if isinstance(variable, dict):
            query = variable.get("query")
            if isinstance(query, dict):
                query = query.get("query")
            where = f"variable {variable.get('name')}"
            out += [(f"{where} query", query), (f"{where} definition", variable.get("definition"))]
    return [(where, text) for where, text in out if isinstance(text, str)]


def declared(dashboard: dict) -> set[str]:
    return {v["name"] for v in (dashboard.get("templating") or {}).get("list") or []
            if isinstance(v, dict) and isinstance(v.get("name"), str)}


def check_variables(dashboard: dict) -> list[Problem]:
    known = declared(dashboard) | set(queries.BUILTIN_VALUES)
    return [Problem("variable", where, f"${name} is not a dashboard variable")
            for where, text in texts(dashboard)
            for name in queries.variables_of(text) if name not in known]


# ---- 4. PromQL that parses, 5. metrics that exist ----------------------------------


def checked_queries(dashboard: dict) -> list[tuple[queries.Query, str]]:
    """Each query with variables substituted; those with an undeclared
    variable are left to check 3."""
    values = queries.values_for(dashboard, CHECK_NAMESPACE, CHECK_JOB)
    out = []
    for query in queries.dashboard_queries(dashboard):
        expr = queries.substitute(query.expr, values)
        if not any(name not in values for name in queries.variables_of(expr)):
            out.append((query, expr))
    return out


def check_promql(dashboard: dict) -> list[Problem]:
    todo = checked_queries(dashboard)
    if not todo:
        return []
    rules = {"groups": [{"name": f"q{i}", "rules": [{"record": f"antdt_dashboard:q{i}",
                                                     "expr": expr}]}
                        for i, (_, expr) in enumerate(todo)]}
    with tempfile.TemporaryDirectory(prefix="antdt-dashboards-") as tmp:
        path = os.path.join(tmp, "queries.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(rules, f, sort_keys=False)
        run = subprocess.run(["promtool", "check", "rules", path], capture_output=True,
                             text=True, timeout=60)
    if run.returncode == 0:
        return []
    out: list[Problem] = []
    for line in (run.stdout + run.stderr).splitlines():
        m = re.search(r'group "q(\d+)", rule \d+, "[^"]*": (.*)', line)
        if m:
            query, expr = todo[int(m.group(1))]
            out.append(Problem("promql", query.where, f"{m.group(2)} in: {expr}"))
    if not out:
        out.append(Problem("promql", "promtool", (run.stdout + run.stderr).strip()))
    return out


def known_metrics(repo: str = REPO) -> set[str]:
    """Every metric name an AntDT process exports or a recording rule records."""
    names: set[str] = set(SCRAPE_SERIES)
    for folder in METRIC_SOURCES:
        sources = [p for ext in ("cc", "h")
                   for p in glob.glob(os.path.join(repo, folder, "**", f"*.{ext}"),
                                      recursive=True)
                   if not p.endswith(("_test.cc", "_test.h"))]
        if not sources:
            raise FileNotFoundError(f"no C++ sources in {os.path.join(repo, folder)}")
        for path in sources:
            with open(path, encoding="utf-8") as f:
                source = f.read()
            names.update(re.findall(r'"(antdt_[a-z0-9_]+)"', source))
            for histogram in re.findall(
                    r'BuildHistogram\(\)\s*\.Name\("(antdt_[a-z0-9_]+)"\)', source):
                names.update(histogram + s for s in ("_bucket", "_sum", "_count"))
    with open(os.path.join(repo, "deploy", "prometheus", "antdt-rules.yaml")) as f:
        for group in yaml.safe_load(f)["groups"]:
            names.update(r["record"] for r in group["rules"] if "record" in r)
    return names


PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on",
                   "ignoring", "group_left", "group_right", "inf", "nan", "start", "end"}
_TOKEN = re.compile(r"0x[0-9a-fA-F]+|\d[\w.]*|[A-Za-z_:][\w:]*|.", re.S)


def metric_names(expr: str) -> set[str]:
    """The metric names a (parsing) PromQL expression selects."""
    expr = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)
    expr = re.sub(r"\{[^{}]*\}", " ", expr)  # label matchers
    expr = re.sub(r"\[[^\[\]]*\]", " ", expr)  # ranges, subqueries
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)",
                  " ", expr)
    tokens = _TOKEN.findall(expr)
    names = set()
    for i, token in enumerate(tokens):
        if not re.fullmatch(r"[A-Za-z_:][\w:]*", token) or token.lower() in PROMQL_KEYWORDS:
            continue
        rest = [t for t in tokens[i + 1:] if not t.isspace()]
        if rest and rest[0] == "(":
            continue  # a function or an aggregation
        names.add(token)
    return names


def check_metrics(dashboard: dict, known: set[str]) -> list[Problem]:
    return [Problem("metric", query.where,
                    f"{name} is exported by no AntDT process (services/, core/, "
                    f"backends/) nor recorded by deploy/prometheus/antdt-rules.yaml")
            for query, expr in checked_queries(dashboard)
            for name in sorted(metric_names(expr) - known)]


# ---- all checks ---------------------------------------------------------------


def validate(path: str, known: set[str]) -> list[Problem]:
    try:
        dashboard = queries.load(path)
    except (OSError, ValueError) as e:
        return [Problem("schema", path, f"not JSON: {e}")]
    problems = check_schema(dashboard)
    if not isinstance(dashboard, dict):
        return problems
    problems += check_datasources(dashboard)
    problems += check_variables(dashboard)
    problems += check_promql(dashboard)
    problems += check_metrics(dashboard, known)
    return problems


def default_dashboards() -> list[str]:
    return sorted(glob.glob(os.path.join(DASHBOARDS, "*.json")))


# ---- --self-test: every check can fail -----------------------------------------


def first_target(dashboard: dict) -> dict:
    return next(t for p in queries.iter_panels(dashboard) for t in p.get("targets") or []
                if "antdt_" in t.get("expr", ""))


def break_schema(d: dict) -> None:
    del next(p for p in queries.iter_panels(d) if p.get("type") != "row")["gridPos"]


def break_datasource(d: dict) -> None:
    first_target(d)["datasource"] = {"type": "prometheus", "uid": "prometheus-prod"}


def break_variable(d: dict) -> None:
    t = first_target(d)
    t["expr"] = t["expr"].replace('"$job"', '"$cluster"')
    assert "$cluster" in t["expr"], t["expr"]


def break_promql(d: dict) -> None:
    t = first_target(d)
    t["expr"] = f"sum by (worker) ({t['expr']}"


def break_metric(d: dict) -> None:
    t = first_target(d)
    t["expr"] = re.sub(r"antdt_\w+", "antdt_job_records_commited", t["expr"], count=1)


FAULTS = {"schema": break_schema, "datasource": break_datasource, "variable": break_variable,
          "promql": break_promql, "metric": break_metric}


def self_test(paths: list[str], known: set[str]) -> int:
    failures = 0
    with tempfile.TemporaryDirectory(prefix="antdt-dashboards-self-test-") as tmp:
        for path in paths:
            name = os.path.basename(path)
            clean = validate(path, known)
            if clean:
                print(f"FAIL {name}: not valid before any fault is planted:")
                print("\n".join(f"  {p}" for p in clean))
                failures += 1
                continue
            for check, plant in FAULTS.items():
                dashboard = queries.load(path)
                plant(dashboard)
                copy_path = os.path.join(tmp, f"{check}-{name}")
                with open(copy_path, "w") as f:
                    json.dump(dashboard, f)
                found = validate(copy_path, known)
                caught = [p for p in found if p.check == check]
                panel_named = check != "promql" or all('panel "' in p.where for p in caught)
                if caught and panel_named:
                    print(f"ok   {name}: {check} fault caught: {caught[0]}")
                else:
                    print(f"FAIL {name}: {check} fault not caught"
                          f"{' (no panel named)' if caught else ''}; found: {found}")
                    failures += 1
    print(f"{failures} failure(s)" if failures else "every fault caught")
    return 1 if failures else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dashboards", nargs="*", help="dashboard JSON files "
                        "(default: every *.json of deploy/helm/antdt/dashboards)")
    parser.add_argument("--self-test", action="store_true",
                        help="plant each fault in a copy of each dashboard; all must be caught")
    args = parser.parse_args(argv)
    if shutil.which("promtool") is None:
        print("promtool not found: scripts/install-deps.sh installs Debian's prometheus",
              file=sys.stderr)
        return 1
    paths = args.dashboards or default_dashboards()
    if not paths:
        print(f"no dashboards in {DASHBOARDS}", file=sys.stderr)
        return 1
    known = known_metrics()
    if args.self_test:
        return self_test(paths, known)
    status = 0
    for path in paths:
        problems = validate(path, known)
        for problem in problems:
            print(f"{os.path.relpath(path, REPO)}: {problem}")
        n = len(queries.dashboard_queries(queries.load(path))) if not problems else 0
        print(f"{'FAIL' if problems else 'ok  '} {os.path.basename(path)}"
              f"{f': {n} queries' if n else ''}")
        status |= bool(problems)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
