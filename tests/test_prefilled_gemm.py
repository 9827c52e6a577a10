"""``kernels/prefilled.py``: a linear layer's bias (and residual) written where the
product goes, then the product added by one ``sgemm`` with beta 1. Checked against torch
on odd shapes, both weight layouts sgemm reads (``(N, K)`` row-major and ``weights_kn``'s
transposed copy), and through the ops that take it (``linear``, ``linear_epilogue``
without activation), with the layouts it declines left to NumPy."""
import numpy as np
import pytest

import dualgraph as dg
from dualgraph.kernels import prefilled
from dualgraph.ops.epilogue import LINEAR_EPILOGUE
from dualgraph.ops.linalg import LINEAR

torch = pytest.importorskip("torch")

SHAPES = [((3, 37), 45), ((1, 7, 33), 17), ((3, 129, 67), 130), ((2, 5, 300), 3), ((129, 1), 5)]


def _want(x, w, b, r=None):
    y = torch.nn.functional.linear(*(torch.tensor(a, dtype=torch.float64) for a in (x, w, b)))
    return (y if r is None else y + torch.tensor(r, dtype=torch.float64)).numpy()


@pytest.mark.parametrize("x_shape,n", SHAPES, ids=str)
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_linear_and_its_residual_equal_torch(x_shape, n, layout):
    rng = np.random.default_rng(n)
    x = rng.normal(0, 2, x_shape).astype(np.float32)
    w = rng.normal(size=(n, x_shape[-1])).astype(np.float32)
    w = w if layout == "nk" else np.ascontiguousarray(w.T).T     # (weights_kn's view)
    b = rng.normal(size=n).astype(np.float32)
    r = rng.normal(size=x_shape[:-1] + (n,)).astype(np.float32)
    assert prefilled.wanted(x, w)
    tol = dict(rtol=2e-5, atol=2e-5 * np.sqrt(x_shape[-1]))
    np.testing.assert_allclose(prefilled.linear(x, w, b), _want(x, w, b), **tol)
    np.testing.assert_allclose(prefilled.linear(x, w, b, r), _want(x, w, b, r), **tol)
    got = LINEAR.kernel(x, w, b)
    assert got.shape == x_shape[:-1] + (n,) and got.dtype == np.float32
    np.testing.assert_allclose(got, _want(x, w, b), **tol)
    for at in ("before", "after"):
        got = LINEAR_EPILOGUE.kernel(x, w, b, r, act="none", bounds=(-np.inf, np.inf),
                                     residual_at=at)
        np.testing.assert_allclose(got, _want(x, w, b, r), **tol)


def test_layouts_it_declines_fall_back_to_numpy():
    """A strided input, a weight neither layout, float64, empty rows: not taken, and the
    op's result still right."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 40)).astype(np.float32)[:, ::2]
    w = rng.normal(size=(9, 40)).astype(np.float32)[:, ::2]
    b = rng.normal(size=9).astype(np.float32)
    assert not prefilled.wanted(x, w)
    assert not prefilled.wanted(np.ascontiguousarray(x), w)
    assert not prefilled.wanted(x.astype(np.float64), np.ascontiguousarray(w, np.float64))
    assert not prefilled.wanted(np.zeros((0, 20), np.float32), np.ascontiguousarray(w))
    np.testing.assert_allclose(LINEAR.kernel(x, w, b), _want(x, w, b), rtol=1e-5, atol=1e-4)
    assert LINEAR.kernel(np.zeros((0, 20), np.float32), np.ascontiguousarray(w), b).shape \
        == (0, 9)


def test_a_compiled_post_norm_block_equals_eager_and_torch():
    """An attention-free post-residual block (linear + residual, then linear with bias
    alone), batch 1 and 3, compiled and eager against torch."""
    def make(lib):
        nn = lib.nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = nn.Linear(24, 24), nn.Linear(24, 31)

            def forward(self, x):
                return self.b(self.a(x) + x)
        return Block()
    reference = make(torch)
    model = make(dg)
    model.load_state_dict({k: dg.tensor(v.detach().numpy())
                           for k, v in reference.state_dict().items()})
    compiled = dg.compile(model)
    for rows in ((1, 7), (3, 13)):
        x = np.random.default_rng(rows[0]).normal(size=rows + (24,)).astype(np.float32)
        with dg.no_grad():
            got = compiled(dg.tensor(x)).numpy()
            eager = model(dg.tensor(x)).numpy()
        with torch.no_grad():
            want = reference(torch.tensor(x)).numpy()
        np.testing.assert_allclose(got, eager, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    ops = [n.op.name for n in compiled._last.executable.graph.nodes]
    assert "linear_epilogue" in ops, ops


def test_operands_that_do_not_fit_are_never_taken():
    """sgemm reads raw pointers: a weight, bias or residual of the wrong shape would read
    past its array and return garbage, so it goes to NumPy's path, which raises (found by
    tests/test_error_parity.py after the merge: eager returned a value)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 6)).astype(np.float32)
    w = rng.normal(size=(5, 6)).astype(np.float32)
    b = rng.normal(size=5).astype(np.float32)
    r = rng.normal(size=(4, 5)).astype(np.float32)
    assert prefilled.wanted(x, w, b, r)
    assert not prefilled.wanted(x, np.ascontiguousarray(w[:, :3]), b)     # K differs
    assert not prefilled.wanted(x, w, np.zeros(6, np.float32))             # bias too long
    assert not prefilled.wanted(x, w, b, np.zeros((5, 5), np.float32))     # residual rows
    with pytest.raises(ValueError, match="mismatch"):   # (dispatch words it for the user)
        LINEAR.kernel(x, np.ascontiguousarray(w[:, :3]), b)
