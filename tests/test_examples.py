"""Smoke tests of the main demo (dualgraph/demo.py) and the examples/ scripts, with tiny
settings: each run must finish, print what the docs promise, and learn something."""
import functools
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dualgraph as dg
from dualgraph import demo

ROOT = Path(__file__).resolve().parent.parent
# Numba's first compile of a step's fused kernels takes tens of seconds (then they are
# cached on disk); these smoke tests check capture and the passes, not the JIT.
NO_JIT = "0"
needs_demo_extra = pytest.mark.skipif(bool(demo.missing_extras()),
                                      reason='needs the demo extra: pip install -e ".[demo]"')

# -------------------------------------------------------------------------------- demo


@needs_demo_extra
def test_demo_tiny_run_prints_accuracy_and_writes_files(tmp_path, capsys):
    out = tmp_path / "sub" / "digits.png"       # the folder does not exist yet
    assert demo.main(["--epochs", "2", "--limit", "300", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "digits: 300 train / 300 test images, 2 epochs"
    match = re.fullmatch(r"test accuracy: (\d\.\d{4})", lines[-1])
    assert match, lines[-1]
    acc = float(match.group(1))
    assert acc > 0.5          # 18 steps on 300 images already beat chance (0.1) by far
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    weights = out.with_suffix(".safetensors")
    state = dg.load(weights)
    assert tuple(state["0.weight"].shape) == (16, 1, 3, 3)
    assert tuple(state["11.weight"].shape) == (10, 64)
    # the reloaded model classifies exactly as the trained one did
    assert f"weights: {weights} (reloaded: test accuracy {acc:.4f})" in lines


def test_demo_names_the_missing_extra(monkeypatch, capsys):
    monkeypatch.setattr(demo, "missing_extras", lambda: ["tqdm", "matplotlib"])
    assert demo.main([]) == 1
    err = capsys.readouterr().err
    assert "tqdm, matplotlib" in err and 'pip install -e ".[demo]"' in err


@needs_demo_extra
def test_demo_step_learns_and_compiled_step_matches_eager(monkeypatch):
    """Ten steps on one fixed batch of real digits drive the loss down, and the step
    captured by dg.compile computes the same losses as the eager one (dropout on: the
    compiled step draws eager's masks)."""
    from threadpoolctl import threadpool_limits  # as the demo does: tiny matrices

    monkeypatch.setenv("DUALGRAPH_NUMBA", NO_JIT)
    (x, y), _ = demo.load_data(seed=0, limit=64)

    def losses(compiled):
        dg.manual_seed(0)
        model = demo.make_model()
        assert model[10].p > 0
        step = demo.make_step(model, dg.optim.Adam(model.parameters(), lr=3e-3), compiled)
        return np.array([step(x, y).item() for _ in range(10)])

    with threadpool_limits(limits=1, user_api="blas"):
        eager, compiled = losses(False), losses(True)
    assert eager[0] > 1.5                   # about log(10) at the start
    assert eager[-1] < 0.5 * eager[0]
    assert np.all(np.diff(eager[:5]) < 0)
    np.testing.assert_allclose(compiled, eager, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------- examples

TINY = {
    "char_gpt.py": ["--n-embd", "32", "--n-head", "2", "--block-size", "32"],
    "char_lstm.py": ["--hidden", "64", "--seq-len", "16"],
}


@functools.cache      # the eager runs are shared by both tests below
def run_example(script: str, *extra: str) -> str:
    cmd = [sys.executable, str(ROOT / "examples" / script), "--steps", "6",
           "--eval-interval", "3", "--eval-batches", "2", "--batch-size", "8",
           "--sample-len", "40", *TINY[script], *extra]
    env = dict(os.environ, PYTHONPATH=str(ROOT), DUALGRAPH_NUMBA=NO_JIT)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def parse(stdout: str):
    """(vocabulary size, {step: train loss}, sample text) from an example's output."""
    vocab = int(re.search(r"vocabulary (\d+)", stdout).group(1))
    losses = {int(s): float(v) for s, v in
              re.findall(r"step +(\d+): train loss (\d+\.\d+)", stdout)}
    sample = stdout.split("sample:\n", 1)[1]
    return vocab, losses, sample[:-1]       # print's own newline


@pytest.mark.parametrize("script", sorted(TINY))
def test_example_trains_and_samples(script):
    vocab, losses, sample = parse(run_example(script))
    assert sorted(losses) == [0, 3, 6]
    # an untrained model is close to uniform over the vocabulary
    assert abs(losses[0] - math.log(vocab)) < 0.3
    assert losses[6] < losses[0] - 0.5
    assert sample.startswith("def ") and len(sample) == 4 + 40


@pytest.mark.parametrize("script", sorted(TINY))
def test_example_compiled_step_matches_eager(script):
    """Neither model draws random numbers inside the step, so --compile must print the
    same losses and sample, digit for digit (all but the timings)."""
    def untimed(stdout):
        return re.sub(r"\(\d+\.\d s\)", "", stdout)

    assert untimed(run_example(script, "--compile")) == untimed(run_example(script))
