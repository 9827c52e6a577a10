"""Ratios over several benchmark reports: ``python -m benchmarks.compare a.json b.json ...``.

One run on a noisy machine proves little; the README quotes, per workload, the ratios of
every run side by side. For each report (the JSON of ``benchmarks.run``, in the order
given) this prints compiled dualgraph over torch eager, over the best peer, eager over
torch eager, the geometric mean of compiled over eager and W5's share of the copy
bandwidth, as one markdown table.
"""
from __future__ import annotations

import argparse
import json
import math

PEERS = ("torch_eager", "torch_compile", "jax_jit", "onnxruntime")


def step(report: dict, wid: str, impl: str) -> float | None:
    r = report["workloads"].get(wid, {}).get(impl, {})
    return r.get("step_ms") if r.get("loss_check", "ok") == "ok" else None


def ratio(a, b) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def rows(reports: list) -> list[str]:
    """Markdown rows: one per ratio, one column per workload, the runs in each cell."""
    wids = sorted({w for r in reports for w in r["workloads"]})

    def best_peer(r, w):
        times = [t for t in (step(r, w, p) for p in PEERS) if t]
        return min(times) if times else None

    lines = ["| ratio | " + " | ".join(wids) + " |", "|---|" + "---|" * len(wids)]
    for name, num, den in (
            ("dg compiled / torch eager", "dualgraph_compiled", "torch_eager"),
            ("dg compiled / best peer", "dualgraph_compiled", None),
            ("dg eager / torch eager", "dualgraph_eager", "torch_eager")):
        cells = []
        for w in wids:
            cells.append(" ".join(
                ratio(step(r, w, num), step(r, w, den) if den else best_peer(r, w))
                for r in reports))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def geomean_speedups(reports: list) -> list[str]:
    """Per report: the geometric mean over workloads of eager time / compiled time."""
    out = []
    for r in reports:
        pairs = [(step(r, w, "dualgraph_eager"), step(r, w, "dualgraph_compiled"))
                 for w in sorted(r["workloads"])]
        logs = [math.log(e / c) for e, c in pairs if e and c]
        out.append(f"{math.exp(sum(logs) / len(logs)):.2f}" if logs else "-")
    return out


def bandwidth_shares(reports: list, wid: str = "W5") -> list[str]:
    out = []
    for r in reports:
        res = r["workloads"].get(wid, {}).get("dualgraph_compiled", {})
        share = res.get("bandwidth_fraction")
        out.append(f"{100 * share:.0f}%" if share is not None else "-")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare")
    parser.add_argument("reports", nargs="+", help="JSON files written by benchmarks.run")
    args = parser.parse_args(argv)
    reports = []
    for path in args.reports:
        with open(path) as f:
            reports.append(json.load(f))
    print("\n".join(rows(reports)))
    print(f"\ncompiled over eager, geometric mean: {', '.join(geomean_speedups(reports))}")
    print(f"W5 share of the copy bandwidth: {', '.join(bandwidth_shares(reports))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
