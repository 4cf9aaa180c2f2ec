#!/usr/bin/python3
"""The cross-scale chart of docs/study.md: each policy's job completion time
over the no-slowdown run's, by worker count, with the 95% confidence interval
of the mean over seeds. Standard library only.

  make-chart.py 100=/tmp/study-100/results.json 1000=/tmp/study-1k/results.json \
                10000=/tmp/study-10k/results.json
      reads `antdt sim`'s results.json files (worker count=path), writes
      summary.json (the figures the study quotes, without the action lists)
      and ratio-by-scale.svg beside this script.
  make-chart.py
      redraws ratio-by-scale.svg from the committed summary.json.
"""
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SUMMARY = os.path.join(HERE, "summary.json")
CHART = os.path.join(HERE, "ratio-by-scale.svg")
COLORS = {"antdt-nd": "#2ca02c", "antdt-dd": "#1f77b4", "lb-bsp": "#ff7f0e", "none": "#d62728"}
KEYS = ("jct_seconds", "jct_ci95_seconds", "jct_seconds_by_seed", "ratio_to_no_slowdown",
        "steps", "restarts", "skipped_seed_1", "step_reports", "ledger_calls", "wall_seconds")


def summarize(path):
    """One scale's figures: per policy, the keys the study quotes, plus the
    per-worker actions and the ADJUST_BS rounds (distinct times) of seed 1."""
    with open(path) as f:
        results = json.load(f)
    out = {"scenario": results["scenario"], "seeds": results["seeds"], "policies": {}}
    for run in results["results"]:
        entry = {k: run[k] for k in KEYS}
        entry["actions_seed_1"] = len(run["actions"])
        entry["rounds_seed_1"] = len({a["at_seconds"] for a in run["actions"]})
        out["policies"][run["policy"]] = entry
    return out


def chart(summary):
    """An SVG line chart: x the worker counts (log scale), y the ratio to
    no-slowdown, a line per policy with its 95% CI as error bars."""
    scales = sorted(summary, key=int)
    policies = [p for p in COLORS if all(p in summary[s]["policies"] for s in scales)]
    width, height, left, right, top, bottom = 640, 400, 60, 120, 30, 50
    top_ratio = 1.0
    for s in scales:
        ideal = summary[s]["policies"]["no-slowdown"]["jct_seconds"]
        for p in policies:
            top_ratio = max(top_ratio, summary[s]["policies"][p]["jct_ci95_seconds"][1] / ideal)
    top_ratio = math.ceil(top_ratio * 2) / 2

    def x(i, k):  # scale i, policy k: a small offset so error bars do not overlap
        span = width - left - right
        return left + 40 + (span - 80) * i / max(1, len(scales) - 1) + (k - 1.5) * 8

    def y(ratio):
        return top + (height - top - bottom) * (top_ratio - ratio) / (top_ratio - 1)

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="12">',
           f'<text x="{left}" y="18">JCT over the no-slowdown run\'s, mean of seeds '
           'with its 95% CI (antdt sim)</text>']
    r = 1.0
    while r <= top_ratio + 1e-9:
        svg.append(f'<line x1="{left}" x2="{width - right}" y1="{y(r):.1f}" y2="{y(r):.1f}" '
                   f'stroke="#ddd"/><text x="{left - 6}" y="{y(r) + 4:.1f}" '
                   f'text-anchor="end">{r:.1f}x</text>')
        r += 0.5
    for i, s in enumerate(scales):
        svg.append(f'<text x="{x(i, 1.5):.1f}" y="{height - bottom + 18}" text-anchor="middle">'
                   f'{int(s):,} workers</text>')
    svg.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 10}" '
               'text-anchor="middle">workers (log scale), the same per-worker load and mix</text>')
    for k, p in enumerate(policies):
        points = []
        for i, s in enumerate(scales):
            ideal = summary[s]["policies"]["no-slowdown"]["jct_seconds"]
            run = summary[s]["policies"][p]
            lo, hi = (v / ideal for v in run["jct_ci95_seconds"])
            px, py = x(i, k), y(run["ratio_to_no_slowdown"])
            points.append(f"{px:.1f},{py:.1f}")
            svg.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{y(lo):.1f}" y2="{y(hi):.1f}" '
                       f'stroke="{COLORS[p]}"/><circle cx="{px:.1f}" cy="{py:.1f}" r="3" '
                       f'fill="{COLORS[p]}"/>')
        svg.append(f'<polyline points="{" ".join(points)}" fill="none" '
                   f'stroke="{COLORS[p]}" stroke-width="2"/>')
        svg.append(f'<text x="{width - right + 10}" y="{top + 20 + 18 * k}" '
                   f'fill="{COLORS[p]}">{p}</text>')
    svg.append(f'<line x1="{left}" x2="{width - right}" y1="{y(1):.1f}" y2="{y(1):.1f}" '
               'stroke="#888" stroke-dasharray="4 3"/>'
               f'<text x="{width - right + 10}" y="{top + 20 + 18 * len(policies)}" '
               'fill="#888">no-slowdown (1x)</text>')
    return "\n".join(svg + ["</svg>"]) + "\n"


def main(args):
    if args:
        summary = {}
        for arg in args:
            workers, path = arg.split("=", 1)
            summary[str(int(workers))] = summarize(path)
        with open(SUMMARY, "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
    else:
        with open(SUMMARY) as f:
            summary = json.load(f)
    with open(CHART, "w") as f:
        f.write(chart(summary))


if __name__ == "__main__":
    main(sys.argv[1:])
