"""The benchmark runner (``benchmarks/run.py``): what a child measures and how the report
reads. (The timings themselves are the suite's job, never a test's.)"""
from benchmarks import run


def test_each_implementation_names_the_library_it_imports():
    assert [run.library(i) for i in run.ALL_IMPLS] == [
        "dualgraph", "dualgraph", "dualgraph", "dualgraph", "torch", "torch", "jax",
        "onnxruntime"]


def test_a_child_times_the_import_apart_from_the_first_call():
    result = run.measure("W7", "dualgraph_eager")
    assert set(result) == {"step_ms", "first_call_s", "import_s", "peak_rss_mb",
                           "first_loss", "timed_steps", "cpu_tuning"}
    assert result["import_s"] >= 0 and result["first_call_s"] > 0
    assert result["timed_steps"] >= run.TIMED


def test_children_run_under_each_cpu_tuning_setting_asked_for():
    """``--tuning``: a child runs with ``DUALGRAPH_CPU_TUNING`` set accordingly, whatever
    the runner's own environment says, and reports what was on."""
    on, default, off = (run.run_child("W7", "dualgraph_eager", t)["cpu_tuning"]
                        for t in ("on", "default", "off"))
    assert on["tricks"] == ["blas", "malloc", "matvec", "recycle"]
    assert default["tricks"] == ["blas", "matvec", "recycle"] and not default["malloc_applied"]
    assert off["tricks"] == [] and not off["malloc_applied"]
    assert on["malloc_applied"] == (run.platform.system() == "Linux")


def test_the_table_has_a_column_per_tuning_setting():
    row = {"step_ms": 1.0, "first_call_s": 0.2, "import_s": 0.1, "peak_rss_mb": 50.0,
           "loss_check": "ok"}
    report = {"workloads": {"W7": {"dualgraph_compiled": row,
                                   "dualgraph_compiled@off": dict(row, step_ms=2.0)}}}
    run.WORKLOAD_NAMES["W7"] = "mlp_infer_latency"
    text = run.table(report)
    assert "| workload | dualgraph_compiled | dualgraph_compiled@off |" in text
    assert "| W7 mlp_infer_latency | 1 ms | 2 ms |" in text


def test_a_compiled_child_says_where_its_first_call_went():
    result = run.measure("W7", "dualgraph_compiled")
    phases = result["first_call_phases"]
    assert phases.startswith("trace ") and "codegen" in phases and "first run" in phases


def test_the_table_shows_first_call_import_and_memory():
    report = {"workloads": {"W7": {
        "dualgraph_compiled": {"step_ms": 0.1, "first_call_s": 0.25, "import_s": 0.07,
                               "peak_rss_mb": 52.0, "loss_check": "ok",
                               "first_call_phases": "trace 0.010 s, passes 0.002 s"},
        "torch_eager": {"step_ms": 0.2, "first_call_s": 0.01, "import_s": 1.2,
                        "peak_rss_mb": 230.0, "loss_check": "ok",
                        "ratio_vs_dualgraph_compiled": 2.0}}}}
    run.WORKLOAD_NAMES["W7"] = "mlp_infer_latency"
    text = run.table(report)
    assert "| W7 mlp_infer_latency | 0.25 s (+0.07 s import) / 52 MB | 0.01 s (+1.2 s import)" \
        in text
    assert "- W7 vs dualgraph_compiled: torch_eager 2.00x" in text
    assert "- W7: trace 0.010 s, passes 0.002 s" in text


def test_rounds_merge_to_the_median_step_and_the_first_rounds_first_call():
    runs = [{"step_ms": 3.0, "first_call_s": 1.5, "import_s": 0.1, "peak_rss_mb": 100.0,
             "first_loss": 2.0, "timed_steps": 20},
            {"step_ms": 1.0, "first_call_s": 0.5, "import_s": 0.1, "peak_rss_mb": 120.0,
             "first_loss": 2.0, "timed_steps": 20},
            {"step_ms": 2.0, "first_call_s": 0.4, "import_s": 0.1, "peak_rss_mb": 110.0,
             "first_loss": 2.0, "timed_steps": 20}]
    merged = run.merge_rounds(runs)
    assert merged["step_ms"] == 2.0 and merged["step_ms_rounds"] == [3.0, 1.0, 2.0]
    assert merged["first_call_s"] == 1.5 and merged["peak_rss_mb"] == 120.0
    assert run.merge_rounds(runs[:1] + [{"error": "timed out"}]) == {"error": "timed out"}


def test_compare_lists_every_runs_ratios_side_by_side():
    from benchmarks import compare

    def report(compiled, eager, torch, jax):
        return {"workloads": {"W5": {
            "dualgraph_compiled": {"step_ms": compiled, "loss_check": "ok",
                                   "bandwidth_fraction": 0.3},
            "dualgraph_eager": {"step_ms": eager, "loss_check": "ok"},
            "torch_eager": {"step_ms": torch, "loss_check": "ok"},
            "jax_jit": {"step_ms": jax, "loss_check": "MISMATCH 1 vs 2"}}}}
    reports = [report(2.0, 8.0, 4.0, 1.0), report(3.0, 6.0, 2.0, 1.0)]
    lines = compare.rows(reports)
    assert lines[2] == "| dg compiled / torch eager | 0.50 1.50 |"
    assert lines[3] == "| dg compiled / best peer | 0.50 1.50 |"   # jax's loss disagreed
    assert lines[4] == "| dg eager / torch eager | 2.00 3.00 |"
    assert compare.geomean_speedups(reports) == ["4.00", "2.00"]
    assert compare.bandwidth_shares(reports) == ["30%", "30%"]


def test_the_programs_report_gives_ratios_of_the_same_computation_only():
    """``torch_programs_eager``: each program's CPU-time ratio, none where the first losses
    differ (another computation), a failed run named, and the geometric mean."""
    from benchmarks import torch_programs_eager as tpe
    row = {"cpu_ms": 10.0, "wall_ms": 12.0, "first": 2.0}
    best = {"a": {"torch": row, "dualgraph": dict(row, cpu_ms=20.0)},
            "b": {"torch": row, "dualgraph": dict(row, cpu_ms=5.0, first=2.5)},
            "c": {"torch": row, "dualgraph": {"error": ["boom"]}}}
    lines = tpe.report(best, ["a", "b", "c"], 10)
    assert lines[1].split()[:4] == ["a", "10.0", "20.0", "2.00"]
    assert lines[2].split()[3] == "nan" and lines[2].endswith("losses differ")
    assert lines[3].startswith("c") and "failed" in lines[3] and "boom" in lines[3]
    assert lines[4] == "geometric mean of the ratios: 2.00 over 1 programs"
    assert set(tpe.PROGRAMS) >= {"gpt", "mnist_cnn", "vae", "vit", "word_lm"}


def test_step_nodes_lists_a_compiled_steps_nodes_in_the_step_and_alone():
    """``benchmarks/step_nodes.py`` on W1 (in a child: it sets one thread before NumPy
    loads): a line per node, each with its time in the step, alone and cold, and its
    kernel."""
    import os
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "benchmarks.step_nodes", "W1", "--steps", "2",
                          "--top", "3", "--evict-mb", "1"], capture_output=True, text=True,
                         check=True, env=dict(os.environ)).stdout.splitlines()
    assert out[0].startswith("W1: step") and out[-1].startswith("load average")
    nodes = out[2:-1]
    assert len(nodes) == 3
    for line in nodes:
        in_step, alone, cold, ratio, kernel = line.split()[:5]
        assert float(in_step) > 0 and float(alone) > 0 and float(cold) > 0 and kernel
