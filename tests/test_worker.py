"""The compile worker (``kernels/worker.py``): loops compile in a separate process, whose
failures reach the user's process as a warning (then Numba's dispatcher runs the loop
here) or, for a Numba that does not import, as the usual clear error; an idle, killed or
interrupted worker is replaced at the next compile; it ignores Ctrl-C; when none can
start, loops compile in the user's process."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from dualgraph import kernels
from dualgraph.kernels import native, worker

pytestmark = pytest.mark.skipif(
    not (kernels.numba_available() and native.enabled() and worker.enabled()),
    reason="Numba or llvmlite is not installed, or not a POSIX system")


@pytest.fixture(autouse=True)
def own_worker(monkeypatch):
    """Each test starts with no worker, and closes the one it leaves."""
    monkeypatch.setattr(worker, "_worker", None)
    yield
    if worker._worker is not None:
        worker._worker.close()


def fresh_loop(expr: str, preamble: str = ""):
    """A generated loop ``out[i] = expr`` that no cache holds yet (so calling it compiles),
    its module starting with ``preamble``."""
    from dualgraph.codegen.cache import load_module
    source = (f"{preamble}from dualgraph.kernels import loop\n"
              "@loop\n"
              f"def fresh(x, out):   # {os.getpid()} {id(object())} {time.time()}\n"
              "    for i in range(x.size):\n"
              f"        out[i] = {expr}\n")
    return load_module(source).fresh


def run(loop):
    x = np.arange(4096, dtype=np.float32)
    out = np.empty_like(x)
    loop(x, out)
    return x, out


def test_a_loop_compiles_in_the_worker_and_numba_stays_out_of_this_process(tmp_path):
    code = textwrap.dedent("""
        import sys
        import numpy as np
        from test_worker import fresh_loop, run
        from dualgraph.kernels import native, worker
        x, out = run(fresh_loop("x[i] * 3 + 1"))
        assert (out == x * 3 + 1).all()
        print("numba" in sys.modules, native.activity.compiled,
              worker._worker.process.pid != 0, worker._worker.alive())
    """)
    env = dict(os.environ, DUALGRAPH_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__)] + sys.path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.stdout.split() == ["False", "1", "True", "True"], out.stderr


def test_an_idle_worker_leaves_and_the_next_compile_starts_another(monkeypatch):
    monkeypatch.setenv("DUALGRAPH_COMPILE_WORKER_IDLE_S", "0.5")
    x, out = run(fresh_loop("x[i] + 1"))
    np.testing.assert_array_equal(out, x + 1)
    first = worker._worker.process
    assert first.wait(timeout=30) == 0              # left, idle
    x, out = run(fresh_loop("x[i] + 2"))
    np.testing.assert_array_equal(out, x + 2)
    assert worker._worker.process.pid != first.pid
    worker._worker.close()                          # (a worker leaves when its stdin closes)
    assert worker._worker.process.returncode == 0


def test_a_killed_worker_is_replaced():
    run(fresh_loop("x[i] - 1"))
    killed = worker._worker.process
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    x, out = run(fresh_loop("x[i] - 2"))
    np.testing.assert_array_equal(out, x - 2)
    assert worker._worker.process.pid != killed.pid


def test_a_worker_dying_mid_compile_is_a_warning_and_the_loop_still_runs():
    """A module that ends any process but this one when imported: the worker exits with
    status 3 while compiling; the loop is then compiled here, by Numba's dispatcher."""
    preamble = f"import os\nif os.getpid() != {os.getpid()}:\n    os._exit(3)\n"
    loop = fresh_loop("x[i] * 5", preamble)
    with pytest.warns(UserWarning, match=r"compile worker exited \(status 3\).*dispatcher"):
        x, out = run(loop)
    np.testing.assert_array_equal(out, x * 5)


def test_a_numba_that_does_not_import_in_the_worker_is_the_usual_clear_error(tmp_path):
    """A broken Numba (here a package of that name that raises on import, first on the
    path) fails in the worker; the user's process raises the error it reports."""
    (tmp_path / "numba").mkdir()
    (tmp_path / "numba" / "__init__.py").write_text("raise ImportError('broken for a test')\n")
    (tmp_path / "numba" / "_version.py").write_text("")   # (what the cache key reads)
    code = textwrap.dedent("""
        from test_worker import fresh_loop, run
        from dualgraph.kernels import native
        try:
            run(fresh_loop("x[i] * 7"))
        except native.NumbaBroken as e:
            print(e)
    """)
    env = dict(os.environ, DUALGRAPH_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.path.dirname(__file__)]
                                          + sys.path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert "fresh" in out.stdout and "does not import (broken for a test)" in out.stdout, (
        out.stdout, out.stderr)
    assert "DUALGRAPH_NUMBA=0" in out.stdout


def test_a_worker_ignores_ctrl_c_and_an_interrupted_request_stops_it():
    """Ctrl-C in a terminal reaches the whole process group: the worker ignores it. The
    user's process, interrupted while waiting for an answer, stops the worker (its late
    answer must not be taken for the next request's) and the next compile starts anew."""
    run(fresh_loop("x[i] * 9"))
    first = worker._worker.process
    first.send_signal(signal.SIGINT)
    time.sleep(0.2)
    assert first.poll() is None

    def interrupt(signum, frame):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)     # while the worker compiles
        with pytest.raises(KeyboardInterrupt):
            run(fresh_loop("x[i] * 11"))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert first.wait(timeout=30) == -signal.SIGKILL
    x, out = run(fresh_loop("x[i] * 13"))
    np.testing.assert_array_equal(out, x * 13)
    assert worker._worker.process.pid != first.pid


@pytest.mark.parametrize("executable", ["/nonexistent/python", None])
def test_a_worker_that_cannot_start_leaves_compiling_to_this_process(monkeypatch,
                                                                      executable):
    """No usable interpreter at ``sys.executable`` (missing; None where an application
    embeds Python): one warning, then loops compile in this process."""
    monkeypatch.setattr(worker, "_cannot_start", None)
    monkeypatch.setattr(sys, "executable", executable)
    with pytest.warns(UserWarning, match=f"could not start.*{executable}"):
        x, out = run(fresh_loop("x[i] * 15"))
    np.testing.assert_array_equal(out, x * 15)
    assert not worker.enabled()
    x, out = run(fresh_loop("x[i] * 17"))     # compiled here, without a warning
    np.testing.assert_array_equal(out, x * 17)
