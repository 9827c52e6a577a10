"""dg.profiler: per-op rows with the right counts, shapes, bytes and source lines, eager and
compiled; totals that add up to the wall time; a valid Chrome trace; schedules and
record_function ranges as torch.profiler's."""
import json
import os
import time
from collections import Counter

import numpy as np
import pytest

import dualgraph as dg
from dualgraph import dispatch
from dualgraph.profiler import (ProfilerAction, profile, record_function, schedule,
                                tensorboard_trace_handler)

W1 = dg.tensor(np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32))
W2 = dg.tensor(np.random.default_rng(1).standard_normal((32, 4)).astype(np.float32))


def mlp(x):
    h = dg.relu(x @ W1 + 1.0)
    return (h @ W2).sum()


def counts(prof, **kw):
    return {e.key: e.count for e in prof.key_averages(**kw)}


def test_eager_rows_have_counts_shapes_bytes_and_lines():
    x = dg.ones(8, 16)
    with profile(record_shapes=True, profile_memory=True, with_stack=True) as prof:
        for _ in range(3):
            mlp(x)
    assert counts(prof) == {"matmul": 6, "add": 3, "relu": 3, "sum": 3}
    by_shape = {(e.key, str(e.input_shapes)): e for e in
                prof.key_averages(group_by_input_shape=True)}
    assert by_shape["matmul", "[[8, 16], [16, 32]]"].count == 3
    assert by_shape["matmul", "[[8, 32], [32, 4]]"].count == 3
    assert by_shape["add", "[[8, 32], []]"].count == 3
    # a fresh (8, 32) float32 result each call
    assert by_shape["matmul", "[[8, 16], [16, 32]]"].self_cpu_memory_usage == 3 * 8 * 32 * 4
    lines = {e.stack[0] for e in prof.events() if e.name == "relu"}
    line = mlp.__code__.co_firstlineno + 1
    assert lines == {f"{__file__}:{line}"}
    by_line = prof.key_averages(group_by_stack_n=1)
    assert {e.key: e.stack for e in by_line}["relu"] == [f"{__file__}:{line}"]
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=2)
    assert "Self CPU time total" in table and "# of Calls" in table
    assert len([r for r in table.splitlines() if r.startswith(("matmul", "add", "relu",
                                                                "sum"))]) == 2


def test_backward_ops_are_recorded():
    w = dg.ones(4, requires_grad=True)
    with profile() as prof:
        (w * 2.0).sum().backward()
    names = [e.name for e in prof.events()]
    assert names.count("mul") >= 2 and "sum" in names   # forward mul, and its VJP's


def test_compiled_nodes_are_timed_with_counts_and_shapes():
    f = dg.compile(mlp)
    x = dg.ones(8, 16)
    expected = f(x).item()
    graph = f._last.executable.graph
    with profile(record_shapes=True, profile_memory=True, with_stack=True) as prof:
        for _ in range(3):
            assert f(x).item() == pytest.approx(expected)
    rows = counts(prof)
    programs = [k for k in rows if k.startswith("compiled graph")]
    assert len(programs) == 1 and rows[programs[0]] == 3
    per_call = Counter("compiled::" + n.op.name for n in graph.nodes)   # ("fused" for one)
    got = Counter()
    for key, n in rows.items():
        if key.startswith("compiled::"):
            got["compiled::fused" if key.startswith("compiled::fused(") else key] += n
    assert got == {k: 3 * v for k, v in per_call.items()}
    assert not any(e.kind == "op" for e in prof.events())   # nothing ran eagerly
    nodes = [e for e in prof.events() if e.kind == "node"]
    assert all(e.cpu_parent.kind == "program" for e in nodes)
    first = next(e for e in nodes if e.name == "compiled::" + graph.nodes[0].op.name
                 or e.name.startswith("compiled::fused"))
    assert first.input_shapes and first.stack and __file__ in first.stack[0]


def test_fused_kernels_are_rows_named_by_their_ops():
    f = dg.compile(lambda x: dg.sin(x) * 2.0 + 1.0)
    x = dg.ones(64)
    f(x)
    f(x)   # (a fused group may compile its kernel at its second call)
    with profile() as prof:
        f(x)
    keys = [e.key for e in prof.key_averages()]
    assert any(k.startswith("compiled::fused(") and "sin" in k for k in keys), keys


def test_control_flow_bodies_are_programs_inside_their_node():
    f = dg.compile(lambda x: dg.while_loop(lambda i, y: i < 3,
                                           lambda i, y: (i + 1, dg.sin(y) * 2.0),
                                           (dg.tensor(0), x))[1])
    x = dg.ones(4)
    f(x)
    with profile() as prof:
        got = f(x)
    np.testing.assert_allclose(got.numpy(), f(x).numpy())
    rows = counts(prof)
    assert rows["compiled::while_loop"] == 1 and rows["compiled::lt"] == 4
    (loop,) = [e for e in prof.events() if e.name == "compiled::while_loop"]
    bodies = [e for e in loop.cpu_children]
    assert len(bodies) == 7 and all(e.kind == "program" for e in bodies)   # 4 tests, 3 steps
    assert loop.self_cpu_time_total < loop.cpu_time_total


def test_not_profiling_leaves_no_hook_even_after_an_error():
    with pytest.raises(ZeroDivisionError):
        with profile():
            1 / 0
    assert dispatch.profiler is None
    with profile():
        with pytest.raises(RuntimeError, match="do not nest"):
            with profile():
                pass
    assert dispatch.profiler is None


def _busy(n):
    return _busy_from(dg.tensor(np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)))


def _busy_from(a):
    """Six rounds of matmul, scale and tanh: dispatched ops and nothing else, so that a
    profile around it has no untimed work (making the input is not an op)."""
    for _ in range(6):
        a = dg.tanh(a @ a * 0.01)
    return a


def _best_of(attempts, measure):
    """``measure()`` returns (recorded, wall): the first attempt whose recorded total is
    within 10% under the wall time passes. A time slice the scheduler gives another
    process between two calls is wall time no profiler can see; a profiler that loses
    time loses it at every attempt."""
    seen = []
    for _ in range(attempts):
        recorded, wall_us = measure()
        seen.append((recorded, wall_us))
        assert recorded <= wall_us            # never more than the wall time
        if recorded >= 0.9 * wall_us:
            return
    raise AssertionError(f"recorded / wall time (us) in {attempts} attempts: {seen}")


def test_totals_are_within_ten_percent_of_wall_time():
    a = dg.tensor(np.random.default_rng(0).standard_normal((384, 384)).astype(np.float32))

    def measure():
        start = time.perf_counter()
        with profile() as prof:
            _busy_from(a)
        wall_us = (time.perf_counter() - start) * 1e6
        return prof.key_averages().self_cpu_time_total, wall_us
    _best_of(3, measure)
    # a range around everything: the self times add up to it, no time counted twice
    with profile() as prof:
        with record_function("all"):
            _busy(64)
    (outer,) = [e for e in prof.events() if e.name == "all"]
    assert prof.events().self_cpu_time_total == pytest.approx(outer.cpu_time_total)


def test_compiled_totals_are_within_ten_percent_of_wall_time():
    f = dg.compile(lambda a: dg.tanh(a @ a * 0.01) @ a)
    a = dg.tensor(np.random.default_rng(0).standard_normal((384, 384)).astype(np.float32))
    f(a)
    f(a)

    def measure(kind):
        start = time.perf_counter()
        with profile() as prof:
            for _ in range(4):
                f(a)
        wall_us = (time.perf_counter() - start) * 1e6
        return sum(e.cpu_time_total for e in prof.events() if e.kind == kind), wall_us
    _best_of(3, lambda: measure("program"))
    _best_of(3, lambda: measure("node"))


def test_chrome_trace_is_valid_json_with_nested_complete_events(tmp_path):
    f = dg.compile(mlp)
    x = dg.ones(8, 16)
    f(x)
    with profile(record_shapes=True, profile_memory=True, with_stack=True) as prof:
        with record_function("step"):
            mlp(x)
            f(x)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    assert os.listdir(tmp_path) == ["trace.json"]   # written atomically: no temp left
    with open(path) as fh:
        trace = json.load(fh)
    events = trace["traceEvents"]
    assert len(events) == len(prof.events())
    for ev in events:
        assert {"ph", "ts", "dur", "name", "pid", "tid"} <= set(ev)
        assert ev["ph"] == "X" and ev["dur"] >= 0
    (step,) = [ev for ev in events if ev["name"] == "step"]
    for ev in events:   # each event lies inside the range (Perfetto nests by time)
        assert step["ts"] <= ev["ts"] and ev["ts"] + ev["dur"] <= step["ts"] + step["dur"] + 1e-3
    cats = {ev["cat"] for ev in events}
    assert cats == {"user_annotation", "cpu_op", "compiled_program", "compiled_node"}
    matmul = next(ev for ev in events if ev["name"] == "matmul")
    assert matmul["args"]["Input Dims"] == [[8, 16], [16, 32]]
    assert matmul["args"]["Source"].startswith(__file__)


def test_schedule_actions_match_torch():
    s = schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=2)
    assert [s(i) for i in range(10)] == [
        ProfilerAction.NONE, ProfilerAction.NONE, ProfilerAction.WARMUP,
        ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE, ProfilerAction.NONE,
        ProfilerAction.WARMUP, ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE,
        ProfilerAction.NONE]
    with pytest.raises(ValueError):
        schedule(wait=0, warmup=0, active=0)


def test_schedule_records_the_active_steps_and_calls_on_trace_ready():
    traces = []

    def ready(prof):
        traces.append([(e.name, e.cpu_parent.name if e.cpu_parent else None)
                       for e in prof.events()])

    x = dg.ones(3)
    with profile(schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                 on_trace_ready=ready) as prof:
        for _ in range(10):
            x = x + 1.0
            prof.step()
    step = [("ProfilerStep#2", None), ("add", "ProfilerStep#2"),
            ("ProfilerStep#3", None), ("add", "ProfilerStep#3")]
    assert traces[0] == step
    assert traces[1] == [(n.replace("#2", "#6").replace("#3", "#7"),
                          p and p.replace("#2", "#6").replace("#3", "#7")) for n, p in step]
    assert len(traces) == 2
    # leaving the block while recording ends that recording too
    traces.clear()
    with profile(schedule=schedule(wait=0, warmup=0, active=5), on_trace_ready=ready) as prof:
        x = x + 1.0
        prof.step()
        x = x * 2.0
    assert traces == [[("ProfilerStep#0", None), ("add", "ProfilerStep#0"),
                       ("ProfilerStep#1", None), ("mul", "ProfilerStep#1")]]


def test_record_function_nests_as_block_and_decorator():
    @record_function("layer")
    def layer(x, depth):
        return layer(x, depth - 1) + 1.0 if depth else x * 2.0

    x = dg.ones(2)
    layer(x, 0)   # not profiling: nothing is recorded, nothing fails
    with profile() as prof:
        with record_function("model"):
            layer(x, 2)
    got = [(e.name, e.cpu_parent.name if e.cpu_parent else None) for e in prof.events()]
    assert got == [("model", None), ("layer", "model"), ("layer", "layer"),
                   ("layer", "layer"), ("mul", "layer"), ("add", "layer"), ("add", "layer")]
    depth = {}
    for e in prof.events():
        depth[e] = depth[e.cpu_parent] + 1 if e.cpu_parent else 0
    assert max(depth.values()) == 4
    avg = {e.key: e for e in prof.key_averages()}
    assert avg["layer"].count == 3 and avg["model"].count == 1
    assert avg["model"].cpu_time_total >= avg["model"].self_cpu_time_total


def test_table_rejects_options_it_cannot_honour():
    with profile() as prof:
        dg.ones(2) + 1.0
    with pytest.raises(ValueError, match="record_shapes"):
        prof.key_averages(group_by_input_shape=True)
    with pytest.raises(ValueError, match="sort by one of"):
        prof.key_averages().table(sort_by="cuda_time_total")


def test_tensorboard_trace_handler_writes_a_trace_per_cycle(tmp_path):
    with profile(schedule=schedule(wait=0, warmup=0, active=1, repeat=2),
                 on_trace_ready=tensorboard_trace_handler(tmp_path, "w0")) as prof:
        for _ in range(3):
            dg.ones(2) + 1.0
            prof.step()
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 2 and all(f.startswith("w0.") and f.endswith(".pt.trace.json")
                                   for f in files)
    for name in files:
        with open(tmp_path / name) as fh:
            assert json.load(fh)["traceEvents"]


@pytest.mark.filterwarnings("ignore:Profiler won.t be using warmup")
@pytest.mark.parametrize("kw", [dict(wait=1, warmup=1, active=2), dict(wait=0, warmup=0,
                                active=1, repeat=3), dict(wait=2, warmup=0, active=3,
                                repeat=1, skip_first=2), dict(wait=0, warmup=2, active=1)])
def test_schedule_matches_torch(kw):
    torch_profiler = pytest.importorskip("torch.profiler")
    ours, theirs = schedule(**kw), torch_profiler.schedule(**kw)
    assert [ours(i).name for i in range(20)] == [theirs(i).name for i in range(20)]


def test_events_while_recording_are_up_to_date():
    with profile() as prof:
        dg.ones(2) + 1.0
        assert [e.name for e in prof.events()] == ["add"]
        dg.ones(2) * 2.0
        assert [e.name for e in prof.events()] == ["add", "mul"]
        assert prof.events().wall_us > 0
