"""The PyTorch programs of ``tests/torch_programs/`` run eagerly under dualgraph (``import
torch`` answered by ``dualgraph.compat.install_torch_alias``) and under PyTorch, from the
same NumPy-drawn weights: the CPU time of each program's ``main`` and dualgraph's ratio.

``python -m benchmarks.torch_programs_eager [--programs gpt,vae] [--steps 4] [--rounds 3]
[--threads 1]``. Each (program, framework) runs in a fresh process (the alias and the real
torch never share one), in turns: torch, dualgraph, torch, dualgraph, ... for ``--rounds``
rounds. A process runs the program once with 2 steps (imports, first calls, kernels loaded
from the disk cache) and then times ``main(steps)``: its training steps, and whatever else
the program does around them (building the model and data, evaluation passes, sampling), as
a user runs it. Reported: the best CPU time (``time.process_time``) and wall time of the
timed run over the rounds, in ms, and dualgraph's CPU-time ratio to torch's; the first loss
of both is compared (1e-3 relative) so that a ratio is of the same computation.
``--threads`` sets every engine's thread count (environment variables, before NumPy loads).
``--profile NAME`` runs one program eagerly under dualgraph in this process with cProfile and
prints its hotspots (``benchmarks.profile``'s table), to see what is above its share.
``--per-step`` reports instead the CPU time of a step, with dualgraph's compiled step as a
third framework: each process times ``main(steps)`` and ``main(2 * steps)`` after the
warm-up, and a step is their difference over ``steps`` (what the run around the steps and
each ``main``'s compiling cost cancel out of, as long as both runs capture the same graphs).
"""
from __future__ import annotations

import argparse
import cProfile
import importlib.util
import json
import math
import os
import pathlib
import pstats
import subprocess
import sys
import time

from .profile import hotspots

PROGRAMS_DIR = pathlib.Path(__file__).resolve().parent.parent / "tests" / "torch_programs"
PROGRAMS = sorted(p.stem for p in PROGRAMS_DIR.glob("*.py") if p.stem != "run")
FRAMEWORKS = ("torch", "dualgraph")
WARM_STEPS = 2


def _runner():
    """tests/torch_programs/run.py, whose ``run(name, mode, steps)`` runs a program."""
    spec = importlib.util.spec_from_file_location("torch_programs_run", PROGRAMS_DIR / "run.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    return runner


def child(name: str, framework: str, steps: int, per_step: bool = False) -> dict:
    """Run program ``name`` under ``framework`` once to warm up, then time it (this
    process); returns the times and the program's first loss (``per_step``: and the CPU
    time of a step, from a second run of twice the steps)."""
    runner = _runner()
    mode = {"dualgraph": "eager"}.get(framework, framework)
    runner.run(name, mode, WARM_STEPS)
    cpu, wall = time.process_time(), time.perf_counter()
    result = runner.run(name, mode, steps)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    first = next((v[0] for v in result.values() if isinstance(v, list) and v
                  and isinstance(v[0], float)), None)
    out = {"cpu_ms": 1e3 * cpu, "wall_ms": 1e3 * wall, "first": first,
           "framework": result["framework"]}
    if per_step:
        twice = time.process_time()
        runner.run(name, mode, 2 * steps)
        out["step_ms"] = 1e3 * (time.process_time() - twice - cpu) / steps
    return out


def profile(name: str, steps: int) -> None:
    """Print the hotspots of program ``name``'s eager run under dualgraph (after a warm-up
    run), by own time."""
    runner = _runner()
    runner.run(name, "eager", WARM_STEPS)
    prof = cProfile.Profile(time.process_time)   # (CPU time: see benchmarks/profile.py)
    prof.enable()
    runner.run(name, "eager", steps)
    prof.disable()
    stats = pstats.Stats(prof)
    print(f"{name} under dualgraph eager: {1e3 * stats.total_tt:.1f} ms profiled ({steps} steps)")
    print("\n".join(hotspots(stats, 1, 30)))


def measure(name: str, framework: str, steps: int, threads: int, per_step=False) -> dict:
    """``child`` in a fresh process, with ``threads`` threads for every engine."""
    env = dict(os.environ, PYTHONPATH=str(PROGRAMS_DIR.parent.parent))
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "DUALGRAPH_NUM_THREADS"):
        env[var] = str(threads)
    proc = subprocess.run([sys.executable, "-m", "benchmarks.torch_programs_eager", "--child",
                           name, framework, str(steps)] + ["--per-step"] * per_step,
                          env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:] or ["failed"]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(best: dict, programs, steps: int) -> list[str]:
    """One line per program: each framework's best CPU and wall ms, and the ratio."""
    lines = [f"{'program':18s} {'torch cpu':>10s} {'dg cpu':>10s} {'ratio':>6s}  "
             f"{'torch wall':>10s} {'dg wall':>10s}  ({steps} steps, best of the rounds)"]
    ratios = []
    for name in programs:
        t, d = best[name].get("torch"), best[name].get("dualgraph")
        if t is None or d is None or "error" in t or "error" in d:
            lines.append(f"{name:18s} failed: {(t or {}).get('error')} {(d or {}).get('error')}")
            continue
        same = (t["first"] is None or d["first"] is None
                or math.isclose(t["first"], d["first"], rel_tol=1e-3))
        ratio = d["cpu_ms"] / t["cpu_ms"]
        if same:
            ratios.append(ratio)
        lines.append(f"{name:18s} {t['cpu_ms']:10.1f} {d['cpu_ms']:10.1f} "
                     f"{ratio if same else float('nan'):6.2f}  {t['wall_ms']:10.1f} "
                     f"{d['wall_ms']:10.1f}" + ("" if same else "  losses differ"))
    if ratios:
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        lines.append(f"geometric mean of the ratios: {geo:.2f} over {len(ratios)} programs")
    return lines


def report_steps(best: dict, programs, steps: int) -> list[str]:
    """One line per program: the CPU ms of a step under torch, dualgraph eager and
    dualgraph compiled, and the two ratios to torch's."""
    lines = [f"{'program':18s} {'torch':>8s} {'eager':>8s} {'compiled':>8s} {'eager/t':>8s} "
             f"{'comp/t':>8s}  (CPU ms a step, from {steps} and {2 * steps} steps)"]
    for name in programs:
        got = [best[name].get(f, {}) for f in FRAMEWORKS + ("compiled",)]
        if any("step_ms" not in g for g in got):
            lines.append(f"{name:18s} failed: {[g.get('error') for g in got]}")
            continue
        t, e, c = (g["step_ms"] for g in got)
        lines.append(f"{name:18s} {t:8.2f} {e:8.2f} {c:8.2f} {e / t:8.2f} {c / t:8.2f}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.torch_programs_eager")
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", metavar="NAME")
    parser.add_argument("--per-step", action="store_true")
    parser.add_argument("--child", nargs=3, metavar=("NAME", "FRAMEWORK", "STEPS"))
    args = parser.parse_args(argv)
    if args.profile:
        profile(args.profile, args.steps)
        return 0
    if args.child:
        name, framework, steps = args.child
        print(json.dumps(child(name, framework, int(steps), args.per_step)))
        return 0
    programs = args.programs.split(",")
    best: dict = {name: {} for name in programs}
    for _ in range(args.rounds):
        for name in programs:
            for framework in FRAMEWORKS + ("compiled",) * args.per_step:
                got = measure(name, framework, args.steps, args.threads, args.per_step)
                key = "step_ms" if args.per_step else "cpu_ms"
                old = best[name].get(framework)
                if old is None or "error" in old or got.get(key, math.inf) < old[key]:
                    best[name][framework] = got
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, "
          f"{args.threads} thread(s) per engine")
    print("\n".join((report_steps if args.per_step else report)(best, programs, args.steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
