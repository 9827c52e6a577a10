"""Run the benchmark workloads side by side: ``python -m benchmarks.run``.

Each (workload, implementation) runs in its own child process, one after another within
this one invocation, so first-call time is cold and peak memory belongs to that
implementation alone. The library's import is timed on its own, before the first call:
the first call is building the model, tracing, optimising, compiling and running the first
step (what ``import dualgraph``/``torch``/``jax`` costs is the same for every program).
The parent checks that every implementation's first-step loss agrees (1e-4 relative)
before it prints any ratio, then writes a markdown table and JSON in the shape
docs/benchmarks.md describes.

dualgraph's CPU tuning (``dualgraph/kernels/tuning.py``) is set per child through
``DUALGRAPH_CPU_TUNING``: ``--tuning`` lists the settings to measure dualgraph under, each
a column of its own. ``on`` (every trick, including the process-wide malloc settings)
keeps the plain names (``dualgraph_compiled``), which the ratios and ``compare.py`` read;
``default`` (what ``import dualgraph`` gives: the thread tricks, malloc untouched) and
``off`` (no trick) are reported as ``dualgraph_compiled@default`` and so on.
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

WORKLOADS = {"W1": "w1_mlp_train", "W2": "w2_cnn_train", "W3": "w3_gpt_train",
             "W4": "w4_lstm_train", "W5": "w5_fused_elementwise", "W6": "w6_tiny_ops",
             "W7": "w7_mlp_infer_latency", "W8": "w8_resnet18_infer",
             "W8/16": "w8_resnet18_infer", "W9": "w9_mobilenet_infer",
             "W9/16": "w9_mobilenet_infer", "W10": "w10_encoder_infer",
             "W10/16": "w10_encoder_infer", "W11": "w11_resnet_cifar_train"}
# A workload run at another batch than its module's default: ``make_data(batch=...)``
BATCHES = {"W8/16": 16, "W9/16": 16, "W10/16": 16}
ALL_IMPLS = ["dualgraph_eager", "dualgraph_compiled", "dualgraph_compiled_scan",
             "dualgraph_to_static", "torch_eager", "torch_compile", "jax_jit", "onnxruntime"]
WARMUP, TIMED = 5, 20      # at least; a workload module may ask for more (WARMUP, TIMED)
LOSS_RTOL = 1e-4
TUNING = {"on": "1", "default": None, "off": "0"}   # --tuning -> DUALGRAPH_CPU_TUNING
CHILD_TIMEOUT_S = 600     # torch.compile of W3/W4 takes minutes on a busy 2-core box


def measure(workload_id: str, impl: str) -> dict:
    """Runs in the child: import, build + first call, warm-up, timed steps, peak RSS."""
    import numpy as np
    mod = importlib.import_module(f"benchmarks.{WORKLOADS[workload_id]}")
    data = (mod.make_data(batch=BATCHES[workload_id]) if workload_id in BATCHES
            else mod.make_data())
    t0 = time.perf_counter()
    importlib.import_module(library(impl))
    import_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    step = mod.IMPLS[impl](data)
    first_loss = step()
    first_call_s = time.perf_counter() - t0
    for _ in range(max(WARMUP, getattr(mod, "WARMUP", WARMUP)) - 1):
        step()
    times = []
    for _ in range(max(TIMED, getattr(mod, "TIMED", TIMED))):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    result = {"step_ms": float(np.median(times) * 1e3), "first_call_s": first_call_s,
              "import_s": import_s,
              "peak_rss_mb": peak_rss_mb(), "first_loss": float(first_loss),
              "timed_steps": len(times)}
    if hasattr(step, "explain"):   # a dg.compile'd step: its first call, phase by phase
        result["first_call_phases"] = first_call_phases(step.explain())
    if library(impl) == "dualgraph":
        from dualgraph.kernels import tuning
        result["cpu_tuning"] = tuning.report()
    return result


def first_call_phases(report: str) -> str:
    """The ``time:`` line of the first capture in a ``dg.compile`` report (``explain()``):
    ``trace 11.5 ms, ..., first run 1.26 s (kernels: 1 compiled in 1.13 s, ...)``."""
    return next((line.strip()[len("time: "):] for line in report.splitlines()
                 if line.strip().startswith("time: ")), "")


def peak_rss_mb() -> float:
    """This process's peak resident memory. Linux keeps ru_maxrss across exec, so a child
    would report the parent's peak; VmHWM belongs to the child's own address space."""
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024
    except OSError:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def library(impl: str) -> str:
    """The module an implementation runs on."""
    return impl.split("_")[0] if impl.startswith(("dualgraph", "torch", "jax")) else impl


def available(impl: str) -> str | None:
    """None if the implementation's library is importable, else a note why it is skipped."""
    need = library(impl)
    if need == "dualgraph":
        return None
    try:
        importlib.import_module(need)
    except ImportError:
        return f"{need} is not installed (pip install -e \".[bench]\" installs the peers)"
    return None


THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def run_child(workload_id: str, impl: str, tuning: str = "on") -> dict:
    """Measure in a fresh process, which inherits the thread caps of ``--threads``, with
    dualgraph's CPU tuning set to ``tuning`` (a key of ``TUNING``)."""
    cmd = [sys.executable, "-m", "benchmarks.run", "--child", workload_id, impl]
    env = {k: v for k, v in os.environ.items() if k != "DUALGRAPH_CPU_TUNING"}
    if TUNING[tuning] is not None:
        env["DUALGRAPH_CPU_TUNING"] = TUNING[tuning]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
                              check=False, env=env,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT_S} s"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return {"error": tail[0][:200]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def merge_rounds(runs: list) -> dict:
    """One implementation's result over ``--rounds``: the median step time (each round's
    in ``step_ms_rounds``), the first round's first call (the only cold one) and import,
    the largest peak RSS. A failed or skipped round makes the whole result that round's."""
    bad = next((r for r in runs if "step_ms" not in r), None)
    if bad is not None or len(runs) == 1:
        return bad or runs[0]
    import statistics
    merged = dict(runs[0])
    merged["step_ms"] = statistics.median(r["step_ms"] for r in runs)
    merged["step_ms_rounds"] = [r["step_ms"] for r in runs]
    merged["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    return merged


def check_losses(results: dict) -> None:
    """Mark each implementation's loss_check against the first one that ran."""
    ref = next((r["first_loss"] for r in results.values() if "first_loss" in r), None)
    for r in results.values():
        if "first_loss" not in r:
            continue
        ok = abs(r["first_loss"] - ref) <= LOSS_RTOL * max(abs(ref), 1e-12)
        r["loss_check"] = "ok" if ok else f"MISMATCH {r['first_loss']:.6g} vs {ref:.6g}"


def machine_info() -> dict:
    """Versions, cores, load and each library's thread count (default settings)."""
    info = {"python": platform.python_version(), "cpu_count": os.cpu_count(),
            "platform": platform.platform(), "load_avg_1m": os.getloadavg()[0],
            "date": time.strftime("%Y-%m-%d %H:%M")}
    info.update({k: os.environ[k] for k in THREAD_VARS if k in os.environ})
    import numpy as np
    info["numpy"] = np.__version__
    try:
        from threadpoolctl import threadpool_info
        info["numpy_blas_threads"] = {p["internal_api"]: p["num_threads"]
                                      for p in threadpool_info()}
    except ImportError:
        pass
    if available("torch_eager") is None:
        import torch
        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    if available("jax_jit") is None:
        import jax
        info["jax"] = jax.__version__
        info["jax_threads"] = "XLA CPU default (one intra-op pool over all cores)"
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


def add_rooflines(mod, results: dict, roof: dict) -> None:
    """The fraction of a limit each implementation reaches: W1's matmul FLOPs against
    the GEMM roofline, W5's compulsory bytes against the copy bandwidth."""
    for r in results.values():
        if "step_ms" not in r:
            continue
        seconds = r["step_ms"] / 1e3
        if hasattr(mod, "FLOPS"):
            r["gemm_fraction"] = mod.FLOPS / seconds / (roof["gemm_gflops"] * 1e9)
        if hasattr(mod, "BYTES"):
            r["bandwidth_fraction"] = mod.BYTES / seconds / (roof["copy_gbps"] * 1e9)


def add_ratios(results: dict) -> None:
    """The headline: peer time / dualgraph time (> 1: dualgraph is faster), per peer,
    against dualgraph compiled and eager, only where both losses agree."""
    for ours in ("dualgraph_compiled", "dualgraph_eager"):
        mine = results.get(ours, {})
        if mine.get("loss_check") != "ok":
            continue
        for peer, r in results.items():
            if not peer.startswith("dualgraph") and r.get("loss_check") == "ok":
                r[f"ratio_vs_{ours}"] = r["step_ms"] / mine["step_ms"]


def cell(r: dict | None) -> str:
    if r is None:
        return "-"
    if "step_ms" not in r:
        return r.get("error") or r["skipped"]
    text = f"{r['step_ms']:.3g} ms"
    if "gemm_fraction" in r:
        text += f" ({100 * r['gemm_fraction']:.0f}% GEMM)"
    if "bandwidth_fraction" in r:
        text += f" ({100 * r['bandwidth_fraction']:.0f}% BW)"
    return text if r.get("loss_check") == "ok" else text + f" ({r.get('loss_check')})"


def table(report: dict) -> str:
    """Markdown: median step time per implementation, then first-call time and peak RSS,
    where dualgraph compiled's first calls went, then the ratios."""
    impls = [i for i in ALL_IMPLS if any(i in w for w in report["workloads"].values())]
    impls += [k for w in report["workloads"].values() for k in w
              if "@" in k and k not in impls]    # (dualgraph under other tuning settings)
    impls = list(dict.fromkeys(impls))
    head = "| workload | " + " | ".join(impls) + " |"
    rule = "|" + "---|" * (len(impls) + 1)
    steps, firsts = [head, rule], [head, rule]
    for wid, res in report["workloads"].items():
        name = f"| {wid} {WORKLOAD_NAMES[wid]} | "
        steps.append(name + " | ".join(cell(res.get(i)) for i in impls) + " |")
        firsts.append(name + " | ".join(
            f"{res[i]['first_call_s']:.3g} s (+{res[i]['import_s']:.2g} s import) / "
            f"{res[i]['peak_rss_mb']:.0f} MB"
            if "step_ms" in res.get(i, {}) else "-" for i in impls) + " |")
    lines = ["Median step time (W1: share of the GEMM roofline; W5: of the copy bandwidth):",
             ""] + steps
    lines += ["", ("First call (build, trace, optimise, compile, first step), the library's "
                   "import timed apart / peak RSS:"), ""]
    lines += firsts
    phases = [f"- {wid}: {res['dualgraph_compiled']['first_call_phases']}"
              for wid, res in report["workloads"].items()
              if res.get("dualgraph_compiled", {}).get("first_call_phases")]
    if phases:
        lines += ["", "dualgraph_compiled's first call, phase by phase (from `explain()`):",
                  ""] + phases
    lines += ["", "Ratios peer / dualgraph (> 1: dualgraph faster; only where losses agree):"]
    for wid, res in report["workloads"].items():
        for ours in ("dualgraph_compiled", "dualgraph_eager"):
            key = f"ratio_vs_{ours}"
            parts = [f"{p} {r[key]:.2f}x" for p, r in res.items() if key in r]
            if parts:
                lines.append(f"- {wid} vs {ours}: " + ", ".join(parts))
    return "\n".join(lines)


WORKLOAD_NAMES = {}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run")
    # (the real-model workloads, W8 on, take minutes each: run them with --workloads)
    parser.add_argument("--workloads", default="W1,W2,W3,W4,W5,W6,W7")
    parser.add_argument("--impls", default=",".join(ALL_IMPLS))
    parser.add_argument("--json", default=None, help="write the JSON report here")
    parser.add_argument("--threads", type=int, default=None,
                        help="cap NumPy's BLAS and torch's threads (jax ignores it); default: "
                             "each library's own, as BENCHMARKS.md asks")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure every implementation this many times, in turns, and "
                             "report the median step time (steadier on a noisy machine)")
    parser.add_argument("--tuning", default="on,default",
                        help="dualgraph's CPU tuning settings to measure, comma-separated: "
                             "on (DUALGRAPH_CPU_TUNING=1, malloc included), default (unset: "
                             "what import gives), off (=0); default: on,default")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    settings = args.tuning.split(",")
    if not settings or any(t not in TUNING for t in settings):
        parser.error(f"--tuning takes a comma list of {', '.join(TUNING)}")
    if args.child:
        print(json.dumps(measure(*args.child)))
        return 0
    if args.threads:   # before numpy/torch load in this process, inherited by the children
        os.environ.update({k: str(args.threads) for k in THREAD_VARS})
    for wid, modname in WORKLOADS.items():
        WORKLOAD_NAMES[wid] = importlib.import_module(f"benchmarks.{modname}").NAME
    report = {"machine": machine_info(), "rooflines": rooflines(), "tuning": settings,
              "workloads": {}}
    print(f"machine: {report['machine']}\nrooflines: {report['rooflines']}", file=sys.stderr)
    for wid in args.workloads.split(","):
        mod = importlib.import_module(f"benchmarks.{WORKLOADS[wid]}")
        notes = getattr(mod, "NOTES", {})
        runs = {}
        for _ in range(args.rounds):   # in turns: a slow spell of the machine hits all
            for impl in args.impls.split(","):
                for tuning in settings if library(impl) == "dualgraph" else ["on"]:
                    name = impl if tuning == "on" else f"{impl}@{tuning}"
                    if impl in notes:
                        runs[name] = [{"skipped": notes[impl]}]
                    elif impl in mod.IMPLS:
                        why = available(impl)
                        result = {"skipped": why} if why else run_child(wid, impl, tuning)
                        runs.setdefault(name, []).append(result)
                        print(f"{wid} {name}: {result}", file=sys.stderr, flush=True)
        results = {impl: merge_rounds(rs) for impl, rs in runs.items()}
        check_losses(results)
        add_rooflines(mod, results, report["rooflines"])
        add_ratios(results)
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
