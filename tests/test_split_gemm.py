"""Products split by columns into single-threaded ``sgemm`` calls shared with OpenBLAS's
worker (``kernels/split_gemm.py``): NumPy's values, the same bits whether shared or run
alone, OpenBLAS's own thread count put back, and the 1x1 convs that use it."""
import os

import numpy as np
import pytest

import dualgraph as dg
from dualgraph import kernels
from dualgraph.kernels import blas_threads, split_gemm, tuning


def _sharing() -> bool:
    return (kernels.numba_available() and kernels.native.enabled()
            and blas_threads.count() > 1 and blas_threads.sgemm_address() is not None)


@pytest.fixture
def sharing(monkeypatch):
    """The sharing as a fresh process on this machine's cores has it, whatever an earlier
    test in this worker left (OpenBLAS at one thread, ``DUALGRAPH_NUM_THREADS=1``); put
    back afterwards. Skips on one core or without a native ``sgemm``."""
    cores, found = len(os.sched_getaffinity(0)), tuning.openblas()
    if cores < 2 or found is None:
        pytest.skip("one core, or no OpenBLAS found")
    before = found.threads()
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", str(cores))
    tuning.share_cores(cores)
    try:
        if not _sharing():
            pytest.skip("no native sgemm, or the blas trick is off")
        yield
    finally:
        tuning.share_cores(before)   # (monkeypatch then puts the variable back)


needs_sharing = pytest.mark.usefixtures("sharing")
RNG = np.random.default_rng(0)


def _f32(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


CASES = {   # a (m, k), b (stack, k, n): a 1x1 conv's weight over a batch of images
    "weight over images": (_f32(64, 384), _f32(4, 384, 196)),
    "one image, halves": (_f32(192, 32), _f32(1, 32, 784)),
    "one image, odd columns": (_f32(48, 100), _f32(1, 100, 1001)),
    "odd stack, narrow": (_f32(960, 160), _f32(3, 160, 49)),
}


def _product(a, b, out=None):
    """``a @ b`` by ``split_gemm.fitted`` for these shapes, into ``out`` (a new array when
    not given); None where it declined."""
    (m, k), (stack, _, n) = a.shape, b.shape
    out = np.empty((stack, m, n), np.float32) if out is None else out
    return out if split_gemm.fitted(m, k, stack, n)(a, b, out) else None


@needs_sharing
@pytest.mark.parametrize("name", CASES)
def test_split_products_match_numpy_and_keep_their_bits_alone(monkeypatch, name):
    """Shared, or run alone (one core; the relay backing off on a busy host), a product
    has the same bits, and NumPy's values to float32 rounding; OpenBLAS's own thread count
    is as it was."""
    a, b = CASES[name]
    before = tuning.openblas().threads()
    shared = _product(a, b)
    monkeypatch.setattr(blas_threads.backoff, "alone", 1 << 30)
    backing_off = _product(a, b)
    assert shared is not None and backing_off is not None
    np.testing.assert_array_equal(shared, backing_off)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(shared, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert tuning.openblas().threads() == before
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", "1")
    tuning.share_cores(1)
    assert _product(a, b) is None       # (one thread: the caller's own product)


@needs_sharing
def test_what_split_gemm_leaves_to_its_caller():
    """Too little work, an operand or output not C-contiguous, an output on an operand:
    declined (False, nothing written)."""
    assert _product(_f32(8, 32), _f32(1, 32, 64)) is None
    a, b = CASES["weight over images"]
    assert _product(np.asfortranarray(a), b) is None
    assert _product(a, b, out=np.empty((4, 64, 196, 2), np.float32)[..., 0]) is None
    square = _f32(1, 640, 640)
    assert _product(square[0], square, out=square) is None


def test_blas_alone_holds_openblas_at_one_thread_and_nests():
    """Inside ``blas_alone`` OpenBLAS threads nothing of its own; ``blas_jobs`` still
    counts its worker; its count is back after, also after an error."""
    found = tuning.openblas()
    if found is None or found.threads() < 2:
        pytest.skip("no OpenBLAS with two threads")
    jobs = tuning.blas_jobs()
    with pytest.raises(KeyError):
        with tuning.blas_alone():
            assert found.threads() == 1 and tuning.blas_jobs() == jobs
            with tuning.blas_alone():
                assert found.threads() == 1
            assert found.threads() == 1
            raise KeyError
    assert found.threads() >= 2


@needs_sharing
def test_blas_jobs_is_not_misled_by_another_threads_hold(monkeypatch):
    """While another thread enters and leaves ``blas_alone`` (OpenBLAS at one thread
    inside), ``blas_jobs`` here reports OpenBLAS's own count, never the held-back 1: a
    read of the count slowed (a preempted thread) used to see the other thread's hold
    begin between its two reads, and a split product took np.matmul's other bits."""
    import threading
    import time
    found = tuning.openblas()

    def slow_count():
        time.sleep(0.002)
        return found.threads()
    monkeypatch.setattr(tuning, "openblas", lambda: found._replace(threads=slow_count))
    want, stop = tuning.blas_jobs(), threading.Event()

    def hold():
        while not stop.is_set():
            with tuning.blas_alone():
                time.sleep(0.002)
    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        seen = [tuning.blas_jobs() for _ in range(40)]
    finally:
        stop.set()
        holder.join(timeout=10)
    assert want >= 2 and seen == [want] * 40


@pytest.mark.parametrize("batch,act", [(1, "relu6"), (3, "none")])
def test_compiled_1x1_convs_match_torch_on_either_thread_count(monkeypatch, batch, act):
    """A compiled 1x1 conv (its GEMM split when two threads are on) against torch, on one
    thread and on the default count."""
    torch = pytest.importorskip("torch")
    x = _f32(batch, 48, 28, 28)
    w, bias = _f32(96, 48, 1, 1) * 0.2, _f32(96)
    ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(bias))
    ref = (ref.clamp(0, 6) if act == "relu6" else ref).numpy()

    def fn(x, w, b):
        y = dg.nn.functional.conv2d(x, w, b)
        return dg.nn.functional.relu6(y) if act == "relu6" else y
    compiled = dg.compile(fn)
    before, used = dg.get_num_threads(), []
    # (dg.set_num_threads writes DUALGRAPH_NUM_THREADS, which child processes inherit: put
    # back as it was after the test)
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", str(before))
    run = split_gemm._run
    monkeypatch.setattr(split_gemm, "_run", lambda *a: used.append(1) or run(*a))
    try:
        for threads in (1, before):
            dg.set_num_threads(threads)
            got = compiled(dg.tensor(x), dg.tensor(w), dg.tensor(bias)).numpy()
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    finally:
        dg.set_num_threads(before)
    assert bool(used) == (before > 1 and _sharing())


@needs_sharing
def test_split_products_from_two_python_threads_at_once():
    """Two threads splitting products at once (a data loader beside the model): each gets
    its product; neither's jobs run while the other has put OpenBLAS's count back (its
    worker would hand work to itself and wait forever)."""
    import threading
    a, b = CASES["weight over images"]
    want = _product(a, b)
    results = []

    def work():
        for _ in range(20):
            results.append(np.array_equal(_product(a, b), want))
            np.matmul(b[0].T, a.T)     # (a plain product meanwhile, on OpenBLAS's threads)
    workers = [threading.Thread(target=work, daemon=True) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert not any(w.is_alive() for w in workers) and results == [True] * 40


# -- 2-D products in ranges of rows (``split_gemm.by_rows``: linear, its gradients, matmul) --
def _one_thread_matmul(a, b):
    """``np.matmul`` with OpenBLAS at one thread: the bits ``by_rows`` must give."""
    with tuning.blas_alone():
        return np.matmul(a, b)


ROW_CASES = {   # a (m, k), b (k, n): every layout sgemm reads, odd sizes, a thin sum
    "x @ w.T (linear)": (_f32(1024, 128), _f32(384, 128).T),
    "g.T @ x (weight gradient)": (_f32(1024, 384).T, _f32(1024, 128)),
    "g @ w (input gradient)": (_f32(1000, 300), _f32(300, 257)),
    "odd, both transposed": (_f32(777, 333).T, _f32(129, 777).T),
    "thin sum": (_f32(4099, 2), _f32(2, 1031)),
    "few rows": (_f32(3, 4096), _f32(4096, 700)),
}


@needs_sharing
@pytest.mark.parametrize("name", ROW_CASES)
def test_products_by_rows_give_one_threads_bits_shared_or_alone(monkeypatch, name):
    """Shared between two threads or run alone (the relay backing off), a product in ranges
    of rows has ``np.matmul``'s bits on one thread, into ``out`` or a new array; OpenBLAS's
    own count is as it was."""
    a, b = ROW_CASES[name]
    want, before = _one_thread_matmul(a, b), tuning.openblas().threads()
    jobs, run = [], blas_threads.run

    def spy(address, blocks):     # (jobs handed over, and whether they ran there)
        jobs.append((len(blocks), run(address, blocks)))
        return jobs[-1][1]
    monkeypatch.setattr(blas_threads, "run", spy)
    monkeypatch.setattr(blas_threads.backoff, "alone", 0)
    shared = split_gemm.by_rows(a, b)
    out = np.full(want.shape, np.nan, np.float32)
    monkeypatch.setattr(blas_threads.backoff, "alone", 1 << 30)
    assert split_gemm.by_rows(a, b, out) is out
    np.testing.assert_array_equal(shared, want)
    np.testing.assert_array_equal(out, want)
    assert jobs == [(2, True), (2, False)] and tuning.openblas().threads() == before
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(shared, exact, rtol=1e-4, atol=1e-4 * np.abs(exact).max())


@needs_sharing
def test_what_by_rows_leaves_to_np_matmul(monkeypatch):
    """None, nothing written, where ``np.matmul`` takes the product: too little work, a row
    or a column (a GEMV), float64, a stack, an operand no sgemm reads as it is, one buffer
    twice (a SYRK), an ``out`` on an operand or of another layout, one thread."""
    a, b = ROW_CASES["x @ w.T (linear)"]
    x = _f32(640, 640)
    declined = [(_f32(64, 64), _f32(64, 64), None), (_f32(1, 8192), _f32(8192, 1024), None),
                (_f32(8192, 1024), _f32(1024, 1), None),
                (a.astype(np.float64), b.astype(np.float64), None),
                (_f32(2, 512, 128), _f32(2, 128, 512), None),
                (_f32(1024, 256)[:, ::2], _f32(128, 384), None), (x.T, x, None),
                (a, b, np.empty((1024, 384), np.float32).T.copy().T),
                (x, x[:, :320], x[:, 320:])]
    for a_, b_, out in declined:
        assert split_gemm.by_rows(a_, b_, out) is None
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", "1")
    assert split_gemm.by_rows(a, b) is None


@pytest.mark.parametrize("rows,k,n", [(1024, 128, 384), (333, 520, 129), (3, 2048, 1031)])
def test_linear_and_matmul_give_the_same_bits_on_one_thread_or_two(monkeypatch, rows, k, n):
    """``linear`` (forward, both gradients, the bias's) and ``matmul`` of matrices, eager,
    on the default threads and on one: the same bits (their products by rows), torch's
    values."""
    torch = pytest.importorskip("torch")
    x, w, b, g = _f32(rows, k), _f32(n, k) * 0.1, _f32(n), _f32(rows, n)

    def step():
        xt, wt, bt = (dg.tensor(v, requires_grad=True) for v in (x, w, b))
        y = dg.nn.functional.linear(xt, wt, bt)
        y.backward(dg.tensor(g))
        return [y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy(),
                dg.matmul(dg.tensor(x), dg.tensor(w.T)).numpy()]
    before = dg.get_num_threads()
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", str(before))
    try:
        two = step()
        dg.set_num_threads(1)
        one = step()
    finally:
        dg.set_num_threads(before)
    for got, want in zip(two, one):
        np.testing.assert_array_equal(got, want)
    xt, wt, bt = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    y = torch.nn.functional.linear(xt, wt, bt)
    y.backward(torch.tensor(g))
    for got, want in zip(two, (y, xt.grad, wt.grad, bt.grad, y - bt)):
        want = want.detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
