"""Run the benchmark workloads side by side: ``python -m benchmarks.run``.

Each (workload, implementation) runs in its own child process, one after another within
this one invocation, so first-call time is cold and peak memory belongs to that
implementation alone. The parent checks that every implementation's first-step loss agrees
(1e-4 relative) before it prints any ratio, then writes a markdown table and JSON in the
shape fixed by shared/BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import time

WORKLOADS = {"W6": "w6_tiny_ops"}
ALL_IMPLS = ["dualgraph_eager", "dualgraph_compiled", "torch_eager", "torch_compile",
             "jax_jit", "onnxruntime"]
WARMUP, TIMED = 5, 20
LOSS_RTOL = 1e-4
CHILD_TIMEOUT_S = 300


def measure(workload_id: str, impl: str) -> dict:
    """Runs in the child: build, first call, warm-up, timed steps, peak RSS."""
    import resource

    import numpy as np
    mod = importlib.import_module(f"benchmarks.{WORKLOADS[workload_id]}")
    data = mod.make_data()
    t0 = time.perf_counter()
    step = mod.IMPLS[impl](data)
    first_loss = step()
    first_call_s = time.perf_counter() - t0
    for _ in range(WARMUP - 1):
        step()
    times = []
    for _ in range(max(TIMED, getattr(mod, "TIMED", TIMED))):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"step_ms": float(np.median(times) * 1e3), "first_call_s": first_call_s,
            "peak_rss_mb": peak_kb / 1024, "first_loss": float(first_loss)}


def available(impl: str) -> str | None:
    """None if the implementation's library is importable, else a note why it is skipped."""
    need = {"torch_eager": "torch", "torch_compile": "torch", "jax_jit": "jax",
            "onnxruntime": "onnxruntime"}.get(impl)
    if need is None:
        return None
    try:
        importlib.import_module(need)
    except ImportError:
        return f"{need} is not installed"
    return None


def run_child(workload_id: str, impl: str) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.run", "--child", workload_id, impl]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT_S} s"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return {"error": tail[0][:200]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_losses(results: dict) -> None:
    """Mark each implementation's loss_check against the first one that ran."""
    ref = next((r["first_loss"] for r in results.values() if "first_loss" in r), None)
    for r in results.values():
        if "first_loss" not in r:
            continue
        ok = abs(r["first_loss"] - ref) <= LOSS_RTOL * max(abs(ref), 1e-12)
        r["loss_check"] = "ok" if ok else f"MISMATCH {r['first_loss']:.6g} vs {ref:.6g}"


def machine_info() -> dict:
    info = {"python": platform.python_version(), "cpu_count": os.cpu_count(),
            "platform": platform.platform()}
    try:
        import numpy as np
        info["numpy"] = np.__version__
        import torch
        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def rooflines() -> dict:
    import numpy as np
    a = np.random.default_rng(0).standard_normal((2048, 2048), dtype=np.float32)
    np.matmul(a, a)
    t = min(_time(lambda: np.matmul(a, a)) for _ in range(3))
    x = np.random.default_rng(0).standard_normal((4096, 1024), dtype=np.float32)
    y = np.empty_like(x)
    c = min(_time(lambda: np.copyto(y, x)) for _ in range(5))
    return {"gemm_gflops": 2 * 2048 ** 3 / t / 1e9, "copy_gbps": 2 * x.nbytes / c / 1e9}


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def table(report: dict) -> str:
    impls = [i for i in ALL_IMPLS
             if any(i in w for w in report["workloads"].values())]
    head = "| workload | " + " | ".join(impls) + " |"
    lines = [head, "|" + "---|" * (len(impls) + 1)]
    for wid, res in report["workloads"].items():
        cells = []
        for impl in impls:
            r = res.get(impl)
            if r is None:
                cells.append("-")
            elif "error" in r or "skipped" in r:
                cells.append(r.get("error") or r["skipped"])
            else:
                flag = "" if r.get("loss_check") == "ok" else " (loss mismatch)"
                cells.append(f"{r['step_ms']:.3g} ms{flag}")
        lines.append(f"| {wid} {WORKLOAD_NAMES[wid]} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Ratios peer / dualgraph (> 1: dualgraph faster; only where losses agree):")
    for wid, res in report["workloads"].items():
        for ours in ("dualgraph_compiled", "dualgraph_eager"):
            mine = res.get(ours, {})
            if mine.get("loss_check") != "ok":
                continue
            parts = [f"{p} {r['step_ms'] / mine['step_ms']:.2f}x" for p, r in res.items()
                     if not p.startswith("dualgraph") and r.get("loss_check") == "ok"]
            if parts:
                lines.append(f"- {wid} {ours}: " + ", ".join(parts))
    return "\n".join(lines)


WORKLOAD_NAMES = {}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--impls", default=",".join(ALL_IMPLS))
    parser.add_argument("--json", default=None, help="write the JSON report here")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(*args.child)))
        return 0
    for wid, modname in WORKLOADS.items():
        WORKLOAD_NAMES[wid] = importlib.import_module(f"benchmarks.{modname}").NAME
    report = {"machine": machine_info(), "rooflines": rooflines(), "workloads": {}}
    for wid in args.workloads.split(","):
        mod = importlib.import_module(f"benchmarks.{WORKLOADS[wid]}")
        results = {}
        for impl in args.impls.split(","):
            if impl not in mod.IMPLS:
                continue
            why = available(impl)
            results[impl] = {"skipped": why} if why else run_child(wid, impl)
            print(f"{wid} {impl}: {results[impl]}", file=sys.stderr)
        check_losses(results)
        report["workloads"][wid] = results
    print(table(report))
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1)
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
