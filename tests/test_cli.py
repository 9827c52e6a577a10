"""The ``dualgraph`` command end to end, each subcommand in a subprocess on small inputs."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dualgraph as dg

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = pathlib.Path(dg.__file__).resolve().parent

MODELS = '''
import numpy as np

import dualgraph as dg
from dualgraph import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(self.drop(dg.relu(self.conv(x))).flatten(1))


def make():   # weights from NumPy's generator: the same in every process, whatever ran before
    net = Net()
    rng = np.random.default_rng(0)
    with dg.no_grad():
        for p in net.parameters():
            p.copy_(dg.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32) * 0.1))
    return net
'''


def dualgraph(*args, cwd=ROOT, pythonpath=ROOT, script=None):
    """``python -m dualgraph ARGS`` (or ``python SCRIPT ARGS``) in ``cwd``."""
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    cmd = [sys.executable] + ([str(script)] if script else ["-m", "dualgraph"])
    return subprocess.run(cmd + [str(a) for a in args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_help_lists_every_command():
    out = dualgraph("--help")
    assert out.returncode == 0
    for name in ("demo", "bench", "show", "export", "profile"):
        assert f"    {name} " in out.stdout
    assert dualgraph("demo", "--help").returncode == 0


def test_bench_runs_from_the_project_root_under_the_installed_script(tmp_path):
    # The installed script starts with its own folder on sys.path, not the current
    # directory; a package reached through a link has no benchmarks/ beside it.
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "dualgraph"
    script.write_text("import sys\nfrom dualgraph.__main__ import main\nsys.exit(main())\n")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "dualgraph").symlink_to(PACKAGE)
    out = dualgraph("bench", "--help", cwd=ROOT, pythonpath=tmp_path / "site", script=script)
    assert out.returncode == 0, out.stderr
    assert "--workloads" in out.stdout
    out = dualgraph("bench", "--help", cwd=tmp_path, pythonpath=tmp_path / "site",
                    script=script)
    assert out.returncode == 2
    assert "benchmarks/ folder at the root of the dualgraph source repository" in out.stderr
    assert str(tmp_path / "benchmarks") in out.stderr


def test_export_writes_an_onnx_model_that_onnxruntime_runs(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    (tmp_path / "mymodels.py").write_text(MODELS)
    out = dualgraph("export", "mymodels:make()", "--shape", "1,3,8,8", "-o", "net.onnx",
                    cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "wrote net.onnx" in out.stdout and "Conv  " in out.stdout
    sys.path.insert(0, str(tmp_path))
    try:
        import mymodels
        net = mymodels.make().eval()   # (the export is in eval mode: no dropout)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mymodels", None)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "net.onnx"))
    (got,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, net(dg.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    # a class is instantiated; a bad name or shape is a short error, not a traceback
    assert dualgraph("export", "mymodels:Net", "--shape", "2,3,8,8", "-o", "c.onnx",
                     cwd=tmp_path).returncode == 0
    bad = dualgraph("export", "mymodels:Nope", "--shape", "1,3,8,8", cwd=tmp_path)
    assert bad.returncode == 2 and "Nope" in bad.stderr and "Traceback" not in bad.stderr
    bad = dualgraph("export", "mymodels:Net", "--shape", "1,three", cwd=tmp_path)
    assert bad.returncode == 2 and "--shape 1,three" in bad.stderr
    bad = dualgraph("export", "mymodels:Net", "--shape", "1,3,9,9", cwd=tmp_path)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert "(1, 3, 9, 9)" in bad.stderr and "Linear" in bad.stderr


def test_show_summarises_an_onnx_model(tmp_path):
    pytest.importorskip("onnx")
    dg.manual_seed(0)
    model = dg.nn.Sequential(dg.nn.Linear(5, 7), dg.nn.ReLU(), dg.nn.Linear(7, 2))
    dg.onnx.export(model, (dg.ones(3, 5),), str(tmp_path / "mlp.onnx"))
    out = dualgraph("show", tmp_path / "mlp.onnx")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "ONNX model" in lines[0]
    assert any(line.split() == ["x", "f32[3,5]"] or line.endswith("f32[3,5]")
               for line in lines)
    assert any(line.rstrip().endswith("f32[3,2]") for line in lines)
    params = 5 * 7 + 7 + 7 * 2 + 2
    assert f"{params:,} values" in out.stdout
    ops = dict(line.split() for line in lines[lines.index("ops (3 nodes):") + 1:]
               if line.startswith("  "))   # (the table, not the optimised count after it)
    assert ops == {"Gemm": "2", "Relu": "1"}


def test_show_summarises_a_saved_graph(tmp_path):
    w = dg.ones(4, 4)
    f = dg.jit.trace(lambda x: dg.sin(x) @ w + 1.0, dg.ones(3, 4))
    f.graph.save(str(tmp_path / "g.json"))
    out = dualgraph("show", tmp_path / "g.json")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "dualgraph graph" in lines[0]
    assert lines[lines.index("inputs:") + 1].split() == ["x", "f32[3,4]"]
    assert "1 tensors, 16 values" in out.stdout   # w, frozen into a constant
    ops = dict(line.split() for line in lines[lines.index("ops (3 nodes):") + 1:]
               if line.startswith("  "))   # (the table, not the optimised count after it)
    assert ops == {"sin": "1", "matmul": "1", "add": "1"}
    bad = dualgraph("show", tmp_path / "nothing.json")
    assert bad.returncode == 1 and "nothing.json" in bad.stderr


def test_profile_runs_a_script_prints_the_table_and_writes_the_trace(tmp_path):
    (tmp_path / "work.py").write_text(textwrap.dedent('''
        import sys
        import dualgraph as dg
        print("args:", sys.argv[1:])
        x = dg.ones(8, 8)
        f = dg.compile(lambda a: dg.relu(a @ a) + 1.0)
        for _ in range(int(sys.argv[1])):
            f(x)
            (x * 2.0).sum()
        sys.exit(3)
    '''))
    out = dualgraph("profile", "-o", "t.json", "--row-limit", "-1", "work.py", "4",
                    cwd=tmp_path)
    assert out.returncode == 3, out.stderr   # the script's exit status
    assert "args: ['4']" in out.stdout
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()
            if line.startswith(("mul ", "sum ", "compiled::matmul "))}
    assert rows["mul"][-1] == rows["sum"][-1] == rows["compiled::matmul"][-1] == "4"
    assert "Self CPU time total" in out.stdout
    with open(tmp_path / "t.json") as fh:
        trace = json.load(fh)
    names = [ev["name"] for ev in trace["traceEvents"]]
    assert names.count("mul") == 4 and any(n.startswith("dg.compile(") for n in names)
    assert all({"ph", "ts", "dur", "name", "pid", "tid"} <= set(ev)
               for ev in trace["traceEvents"])
