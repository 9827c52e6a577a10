"""The batch-1 ``linear`` (``kernels/matvec.py``): a matrix-vector product whose rows the
caller and a spinning helper thread claim from a shared job board. Values against float64
and torch, the same bits whichever thread ran which rows (or the caller alone), the helper
really taking rows, callers on several threads at once, a forked child, and the eager and
compiled ``linear`` both taking it (the relu applied inside the product: test_codegen's
test of a relu after a linear)."""
import os
import threading
import time

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph import kernels
from dualgraph.kernels import matvec, tuning

pytestmark = pytest.mark.skipif(not kernels.numba_available(), reason="Numba is not installed")

SHAPES = [(512, 784), (512, 512), (10, 512), (7, 1000), (130, 999), (1030, 64), (3, 4096),
          (37, 127), (37, 128)]   # (each side of matvec.LONG_ROW)


def product(rows, cols, seed=0, bias=True):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols), dtype=np.float32)
    x = rng.standard_normal((1, cols), dtype=np.float32)
    b = rng.standard_normal(rows, dtype=np.float32) if bias else None
    return x, w, b


def reference(x, w, b):
    y = x.astype(np.float64) @ w.T.astype(np.float64)
    return y if b is None else y + b


def alone(x, w, b, relu=False):
    """The product on the calling thread only (the loop the caller runs with no helper)."""
    y = np.empty(x.shape[:-1] + w.shape[:1], np.float32)
    matvec.matvec_alone(w, x, b if b is not None else matvec._NO_BIAS, y,
                        (b is not None) | 2 * relu)
    return y


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_matvec_matches_float64_and_gives_the_bits_of_the_one_thread_loop(rows, cols, bias):
    x, w, b = product(rows, cols, bias=bias)
    y = matvec.matvec(x, w, b)
    assert y.shape == (1, rows) and y.dtype == np.float32
    np.testing.assert_allclose(y, reference(x, w, b), rtol=1e-5, atol=1e-4 * np.sqrt(cols))
    for _ in range(20):   # the helper awake or not, its share of rows varying: same bits
        np.testing.assert_array_equal(matvec.matvec(x, w, b), y)
    np.testing.assert_array_equal(alone(x, w, b), y)


def test_the_helper_takes_rows_of_big_products():
    if tuning.cores() < 2:
        pytest.skip("one core: no helper")
    x, w, b = product(512, 784)
    want = matvec.matvec(x, w, b)
    helper = matvec._shared_helper()
    helper.backoff = tuning.Backoff()   # (an earlier test on a busy machine may have left
    before = helper.board[matvec.HELPED]  # it backing off)
    deadline = time.monotonic() + 10
    while helper.board[matvec.HELPED] == before and time.monotonic() < deadline:
        np.testing.assert_array_equal(matvec.matvec(x, w, b), want)
    # With the other core free the helper runs chunks; where the other core stays busy
    # (another test process on a 2-core machine), it must have noticed and backed off
    # rather than leave the caller waiting.
    assert (helper.board[matvec.HELPED] > before or helper.backoff.backed_off > 0), \
        "the helper never ran a chunk, and never backed off"
    # Idle for far longer than SPIN_POLLS, it sleeps again (polled: on a loaded machine
    # the helper's thread may wait a while for a core before it sees it is idle).
    deadline = time.monotonic() + 5
    while helper.board[matvec.SPINNING] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert helper.board[matvec.SPINNING] == 0


def test_callers_on_several_threads_get_their_own_products():
    cases = [product(512, 784, seed=k) for k in range(4)]
    wants = [reference(*c) for c in cases]
    errors = []

    def caller(k):
        for _ in range(200):
            y = matvec.matvec(*cases[k])
            if not np.allclose(y, wants[k], rtol=1e-5, atol=3e-3):
                errors.append(k)
                return
    threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_operands_of_any_layout_and_leading_ones():
    x, w, b = product(300, 200)
    wt = np.asfortranarray(w)          # not C-contiguous: copied first
    xs = x.reshape(1, 1, 200)          # leading dims of size 1
    np.testing.assert_allclose(matvec.matvec(xs, wt, b[::-1].copy()[::-1]).reshape(1, 300),
                               reference(x, w, b), rtol=1e-5, atol=3e-3)
    assert matvec.matvec(xs, w, b).shape == (1, 1, 300)
    assert matvec.matvec(x[0], w, b).shape == (300,)
    assert not matvec.wanted(np.ones((2, 200), np.float32), w, b)     # two rows: the BLAS
    assert not matvec.wanted(x.astype(np.float64), w.astype(np.float64), None)


def test_a_forked_child_makes_its_own_helper():
    x, w, b = product(512, 784)
    want = matvec.matvec(x, w, b)
    pid = os.fork()
    if pid == 0:   # the child: exit 0 only if its products are right (killed if it hangs)
        import signal
        signal.alarm(30)
        ok = all(np.array_equal(matvec.matvec(x, w, b), want) for _ in range(50))
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def mlp(lib):
    nn = lib.nn
    lib.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def test_batch_one_linear_eager_and_compiled_take_matvec_and_match_torch(monkeypatch):
    model = mlp(dg)
    reference_model = torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
        torch.nn.ReLU(), torch.nn.Linear(512, 10))
    reference_model.load_state_dict({k: torch.tensor(v.numpy())
                                     for k, v in model.state_dict().items()})
    x = np.random.default_rng(3).standard_normal((1, 784), dtype=np.float32)
    calls = []
    real = matvec.matvec
    monkeypatch.setattr(matvec, "matvec", lambda *a, **k: calls.append(1) or real(*a, **k))
    with dg.no_grad():
        eager = model(dg.tensor(x)).numpy()
        assert len(calls) == 3
        compiled = dg.compile(model)
        out = compiled(dg.tensor(x)).numpy()
    code = compiled._last.executable.code
    assert code.count("= matvec") == 3 and code.count("= matvec_relu") == 2, code
    np.testing.assert_array_equal(out, eager)    # the same loop: the same bits
    with torch.no_grad():
        want = reference_model(torch.tensor(x)).numpy()
    np.testing.assert_allclose(eager, want, rtol=1e-5, atol=1e-5)
    # with gradients: the backward of a batch-1 linear through matvec's forward
    xt = dg.tensor(x, requires_grad=True)
    model(xt).sum().backward()
    xr = torch.tensor(x, requires_grad=True)
    reference_model(xr).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_backoff_shares_through_a_lone_stall_and_stops_when_the_cores_are_oversubscribed():
    policy = tuning.Backoff()
    chunks = 16
    assert policy.share()
    policy.settle(True, chunks, True, helped=0)       # a lone stall (a busy host): go on
    assert policy.share()
    policy.settle(True, chunks, True, helped=0)       # a second one soon after: alone
    for _ in range(tuning.FIRST_BACKOFF):
        assert not policy.share()
    assert policy.share()
    policy.settle(True, chunks, True, helped=0)       # and again: twice as long
    assert policy.alone == 2 * tuning.FIRST_BACKOFF
    policy = tuning.Backoff()
    helped = 0
    for _ in range(tuning.WINDOW // chunks):         # a window in which the helper took
        assert policy.share()                         # its half: no backing off
        helped += chunks // 2
        policy.settle(False, chunks, True, helped)
    assert policy.share() and policy.alone == 0
    for _ in range(tuning.WINDOW // chunks):         # awake but starved of CPU: a bad one
        policy.settle(False, chunks, True, helped)
    assert policy.alone == tuning.FIRST_BACKOFF
    policy = tuning.Backoff()
    for _ in range(4 * tuning.WINDOW):                # asleep (waking up): not judged
        policy.settle(False, chunks, False, 0)
    assert policy.alone == 0


def test_products_stay_right_while_the_caller_backs_off():
    x, w, b = product(512, 784)
    want = matvec.matvec(x, w, b)
    helper = matvec._shared_helper()
    if helper is None:
        pytest.skip("one core: no helper")
    helper.backoff.alone = 5
    sequence = helper.board[matvec.TICKET] >> 32
    for _ in range(5):
        np.testing.assert_array_equal(matvec.matvec(x, w, b), want)
    assert helper.board[matvec.TICKET] >> 32 == sequence     # none was posted
    np.testing.assert_array_equal(matvec.matvec(x, w, b), want)
    assert helper.board[matvec.TICKET] >> 32 == sequence + 1


def test_a_scalar_bias_keeps_the_blas_path():
    """``linear`` takes a 0-d bias too; the product reads one bias per output, so that
    one stays on NumPy's matmul (eager and compiled)."""
    rng = np.random.default_rng(6)
    w = dg.tensor(rng.standard_normal((300, 200), dtype=np.float32))
    b = dg.tensor(np.float32(0.5))
    x = dg.tensor(rng.standard_normal((1, 200), dtype=np.float32))

    def f(x):
        return dg.nn.functional.linear(x, w, b)
    with dg.no_grad():
        want = x.numpy() @ w.numpy().T + 0.5
        compiled = dg.compile(f)
        np.testing.assert_allclose(compiled(x).numpy(), want, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-5, atol=1e-4)
    assert "= matvec" not in compiled._last.executable.code


def test_the_polling_loop_leaves_when_told_to_stop():
    """``board[STOP]`` ends the helper's loop at once, however many polls were left."""
    board = np.zeros(matvec._BOARD_WORDS, np.int64)
    loop = threading.Thread(target=matvec.spin, args=(board, 10**15), daemon=True)   # ~a year
    loop.start()
    deadline = time.monotonic() + 30
    while not board[matvec.SPINNING] and time.monotonic() < deadline:
        time.sleep(0.001)
    assert board[matvec.SPINNING] == 1
    board[matvec.STOP] = 1
    loop.join(timeout=30)
    assert not loop.is_alive() and board[matvec.SPINNING] == 0


def test_the_helper_leaves_its_loop_at_exit():
    """At exit the helper stops polling before the interpreter frees its board (a
    process that ends right after an inference must not have it read freed memory)."""
    import subprocess
    import sys
    code = ("import numpy as np, time\n"
            "from dualgraph.kernels import matvec\n"
            "x, w = np.ones((1, 784), np.float32), np.ones((512, 784), np.float32)\n"
            "t = time.monotonic()\n"
            "while time.monotonic() - t < 0.3:\n"
            "    matvec.matvec(x, w)\n"
            "helper = matvec._shared_helper()\n"
            "if helper is not None:\n"
            "    matvec._stop_helper()\n"
            "    assert helper.board[matvec.SPINNING] == 0\n"
            "    assert helper.board[matvec.STOP] == 1\n"
            "print('ok')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


@pytest.mark.parametrize("rows, cols", [(3, 4), (63, 64), (64, 64), (512, 784)])
def test_eager_and_compiled_take_the_same_product_at_every_size(rows, cols):
    """Below ``MIN_ELEMENTS`` weights eager's batch-1 linear is NumPy's matmul; compiled
    code must choose as it does (it used the loop at every size, and the bits differed)."""
    rng = np.random.default_rng(rows)
    w = dg.tensor(rng.standard_normal((rows, cols), dtype=np.float32))
    b = dg.tensor(rng.standard_normal(rows, dtype=np.float32))

    def layer(x):
        return dg.nn.functional.linear(x, w, b)
    compiled = dg.compile(layer)
    with dg.no_grad():
        for seed in range(3):
            x = dg.tensor(np.random.default_rng(seed).standard_normal((1, cols),
                                                                      dtype=np.float32))
            np.testing.assert_array_equal(compiled(x).numpy(), layer(x).numpy())
    uses_loop = matvec.wanted(x.numpy(), w.numpy(), b.numpy())
    assert uses_loop == (rows * cols >= kernels.MIN_ELEMENTS)
    assert ("= matvec(" in compiled._last.executable.code) == uses_loop


def test_the_helper_follows_set_num_threads(monkeypatch):
    """``dg.set_num_threads(1)`` after products were shared stops sharing them (no helper
    used), and two threads again use it; the bits stay the same."""
    if tuning.cores() < 2 or "matvec" not in tuning.active:
        pytest.skip("one core or the matvec trick off: no helper")
    x, w, b = product(512, 784)
    want = matvec.matvec(x, w, b)
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", str(dg.get_num_threads()))  # (put back)
    threads = dg.get_num_threads()
    try:
        dg.set_num_threads(1)
        assert matvec._shared_helper() is None
        np.testing.assert_array_equal(matvec.matvec(x, w, b), want)
        dg.set_num_threads(2)
        assert matvec._shared_helper() is not None
        np.testing.assert_array_equal(matvec.matvec(x, w, b), want)
    finally:
        dg.set_num_threads(threads)
