"""Work handed to OpenBLAS's own threads (``kernels/blas_threads.py``): stacks of small
matrix products (``kernels/batched.py``) give NumPy's bits, whatever the layout; the group
optimiser updates are checked in ``test_optim.py``."""
import numpy as np
import pytest

from dualgraph import kernels
from dualgraph.kernels import batched, blas_threads, tuning
from dualgraph.ops.opdef import REGISTRY

MATMUL = REGISTRY["matmul"].kernel


def _sharing() -> bool:
    """Whether this machine hands slices to OpenBLAS's worker (two threads, native loops)."""
    return (kernels.numba_available() and kernels.native.enabled()
            and blas_threads.count() > 1 and blas_threads.sgemm_address() is not None)


def _attention_operands():
    """Attention's products of a GPT block (W3's shapes): q, k, v are strided views of one
    (batch, seq, 3 * d_model) projection, split into heads and transposed."""
    rng = np.random.default_rng(0)
    qkv = rng.standard_normal((16, 64, 3 * 128), dtype=np.float32)
    q, k, v = (qkv[..., i * 128:(i + 1) * 128].reshape(16, 64, 4, 32).transpose(0, 2, 1, 3)
               for i in range(3))
    scores = np.ascontiguousarray(np.matmul(q, k.transpose(0, 1, 3, 2)))
    grad = rng.standard_normal((16, 4, 64, 32), dtype=np.float32)
    return [("q @ k^T", q, k.transpose(0, 1, 3, 2)), ("p @ v", scores, v),
            ("grad @ v^T", grad, v.transpose(0, 1, 3, 2)),
            ("p^T @ grad", scores.transpose(0, 1, 3, 2), grad),
            ("3-D stack", rng.standard_normal((64, 48, 40), dtype=np.float32),
             rng.standard_normal((64, 40, 56), dtype=np.float32))]


@pytest.mark.parametrize("name,a,b", _attention_operands(), ids=lambda x: x if
                         isinstance(x, str) else "")
def test_stacked_small_products_share_slices_and_give_numpys_bits(monkeypatch, name, a, b):
    """The matmul kernel (eager and compiled code both call it) on a stack of small float32
    products: shared between this thread and OpenBLAS's worker where the machine allows,
    each slice the same sgemm NumPy calls, so the same bits as ``np.matmul``."""
    used = []
    run = batched.matmul
    monkeypatch.setattr(batched, "matmul",
                        lambda a, b, *out: used.append(1) or run(a, b, *out))
    got = MATMUL(a, b)
    np.testing.assert_array_equal(got, np.matmul(a, b))
    assert got.shape == np.matmul(a, b).shape and got.dtype == np.float32
    assert used == ([1] if _sharing() else [])
    if _sharing():
        assert batched.matmul(a, b) is not None     # (not a fallback to NumPy)


def test_stacks_the_slices_cannot_take_go_to_numpy():
    """What is left to ``np.matmul``: a broadcast batch, a row times a matrix (NumPy's GEMV),
    slices too big to run single-threaded inside OpenBLAS, float64, too little work, and
    one buffer used twice (``x^T @ x``, which NumPy computes as a SYRK, other bits)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 64, 32), dtype=np.float32)
    assert not batched.wanted(x, rng.standard_normal((1, 32, 64), dtype=np.float32))
    assert not batched.wanted(x[:, :1], rng.standard_normal((64, 32, 64), dtype=np.float32))
    big = rng.standard_normal((8, 128, 128), dtype=np.float32)
    assert not batched.wanted(big, big)
    assert not batched.wanted(x.astype(np.float64), x.transpose(0, 2, 1).astype(np.float64))
    assert not batched.wanted(x[:2], x[:2].transpose(0, 2, 1))
    same = x.transpose(0, 2, 1)
    assert batched.matmul(same, x) is None
    np.testing.assert_array_equal(MATMUL(same, x), np.matmul(same, x))
    strided = x[:, :, ::2]                    # a column stride of 2: not a BLAS matrix
    assert batched._layout(strided) is None


def test_blas_threads_off_runs_one_thread(monkeypatch):
    """The ``"blas"`` trick off: nothing is handed to OpenBLAS's threads."""
    monkeypatch.setattr(tuning, "active", tuning.active - {"blas"})
    assert blas_threads.count() == 1
    q, k = _attention_operands()[0][1:]
    assert not batched.wanted(q, k)


def _row_and_element_loops():
    """The op kernels whose loops share their rows (or elements) with OpenBLAS's worker
    from ``threads.SHARE_MIN`` elements on, each on inputs of that size: (name, call)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1024, 256), dtype=np.float32) * 3
    g = rng.standard_normal((1024, 256), dtype=np.float32)
    classes = rng.integers(0, 256, 1024)
    classes[5] = -100                                   # an ignored row
    probs = REGISTRY["softmax"].kernel(x, dim=-1)
    logp = REGISTRY["log_softmax"].kernel(x, dim=-1)
    one = np.ones((), np.float32)
    return [
        ("gelu_tanh", lambda: REGISTRY["gelu_tanh"].kernel(x)),
        ("gelu_tanh_backward", lambda: REGISTRY["gelu_tanh_backward"].kernel(g, x)),
        ("softmax", lambda: REGISTRY["softmax"].kernel(x, dim=-1)),
        ("log_softmax", lambda: REGISTRY["log_softmax"].kernel(x, dim=-1)),
        ("softmax_backward", lambda: REGISTRY["softmax_backward"].kernel(g, probs, dim=1)),
        ("log_softmax_backward",
         lambda: REGISTRY["log_softmax_backward"].kernel(g, logp, dim=1)),
        ("cross_entropy_backward", lambda: REGISTRY["cross_entropy_backward"].kernel(
            one, x, classes, ignore_index=-100, reduction="mean")),
    ]


@pytest.mark.parametrize("name,call", _row_and_element_loops(),
                         ids=[n for n, _ in _row_and_element_loops()])
def test_row_loops_shared_with_openblas_give_the_bits_of_one_thread(monkeypatch, name, call):
    """Elementwise and row-by-row loops (tanh-GELU, softmax, log-softmax, their backwards,
    cross-entropy's backward) of ``threads.SHARE_MIN`` elements or more run in two ranges,
    the second on OpenBLAS's worker: the same bits as on one thread."""
    from dualgraph.kernels import threads
    if not kernels.numba_available():
        pytest.skip("the loops need Numba")
    jobs = []
    run = blas_threads.run
    monkeypatch.setattr(blas_threads, "run",
                        lambda address, blocks: jobs.append(len(blocks)) or run(address, blocks))
    expected = [2] if _sharing() and blas_threads.count() == 2 else []
    shared = call()
    monkeypatch.setattr(tuning, "active", tuning.active - {"blas"})
    assert threads.threads_for(1 << 17) == 1
    alone = call()
    np.testing.assert_array_equal(shared, alone)
    assert jobs == expected


def test_jobs_on_openblas_threads_work_in_a_forked_child():
    """A forked child has no OpenBLAS worker threads until OpenBLAS starts them again (it
    does so itself): a loop shared in the parent, then in the child, completes in both
    with the same bits (the child is killed if it hangs)."""
    import os
    x = np.random.default_rng(4).standard_normal(1 << 18).astype(np.float32)
    gelu = REGISTRY["gelu_tanh"].kernel
    want = gelu(x)
    pid = os.fork()
    if pid == 0:
        import signal
        signal.alarm(30)
        ok = np.array_equal(gelu(x), want) and np.array_equal(
            MATMUL(*_attention_operands()[0][1:]), np.matmul(*_attention_operands()[0][1:]))
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_training_steps_loops_have_native_entries():
    """The packed linear's panels (``linear_packed._panels``), the row ranges of 2-D
    products (``split_gemm._row_range``) and a bias gradient's column sums call nothing of
    Numba's runtime (no allocation, no reshape inside): each has a native entry, so shared
    ranges go to OpenBLAS's worker as jobs, not through Numba's dispatcher to a Python
    thread beside that worker, and an eager step does not import Numba (nor, through it,
    SciPy's own OpenBLAS with its threads)."""
    from dualgraph.kernels import linear_packed, split_gemm, sums
    if not (kernels.numba_available() and kernels.native.enabled()):
        pytest.skip("native entries off or no Numba")
    rng = np.random.default_rng(5)
    x, w = (rng.standard_normal(s, dtype=np.float32) for s in ((100, 128), (192, 128)))
    packed = linear_packed.pack(w)
    scratch = np.empty((packed.shape[0], linear_packed.scratch_floats(128)), np.float32)
    args = linear_packed.flat_args(x, packed, np.zeros(192, np.float32),
                                   np.empty((100, 192), np.float32), 12, scratch)
    assert linear_packed._panels.job_address(0, packed.shape[0], *args) is not None
    assert split_gemm._row_range.job_address(0, 2, np.zeros(11, np.int64)) is not None
    out = np.empty(192, np.float32)
    assert kernels.native.address(sums.column_sums.entry(w.reshape(-1), out)) is not None
