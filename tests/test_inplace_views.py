"""Writes through views (ops/views.py): ``y[:, 1].mul_(3)`` changes ``y``, eagerly, in
autograd and under ``dg.compile``, as in PyTorch. Before, a compiled function lost the
write silently (the view got the new value, ``y`` kept the old one) and eager autograd
refused it. Hand-written cases first, then generated programs: a random chain of views
(slices, transposes, reshapes that may copy, unsqueeze, select), an in-place op on it, and
reads of views taken before the write; values and gradients against PyTorch."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import dualgraph as dg


def _outputs(out):
    return list(out) if isinstance(out, tuple) else [out]


def check(program, shape=(3, 4)):
    """``program(lib, w)`` eagerly, compiled (forward, and a whole step with backward) and
    in PyTorch: the same outputs and the same gradient of ``w``."""
    w0 = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = [o.detach().numpy() for o in _outputs(program(torch, torch.tensor(w0)))]
    eager = [o.numpy() for o in _outputs(program(dg, dg.tensor(w0)))]
    compiled_fn = dg.compile(lambda w: program(dg, w))
    compiled = [o.numpy() for o in _outputs(compiled_fn(dg.tensor(w0)))]
    for got in (eager, compiled):
        assert len(got) == len(want)
        for g, x in zip(got, want):
            np.testing.assert_allclose(g, x, rtol=1e-6, atol=1e-6)
    assert " 0 graph break(s)" in compiled_fn.explain().split("\n")[0]

    def loss(lib, w):
        return sum((o * o).sum() for o in _outputs(program(lib, w)))

    wt = torch.tensor(w0, requires_grad=True)
    loss(torch, wt).backward()
    we = dg.tensor(w0, requires_grad=True)
    loss(dg, we).backward()
    wc = dg.tensor(w0, requires_grad=True)

    def step(w):
        value = loss(dg, w)
        value.backward()
        return value
    dg.compile(step)(wc)
    for got in (we.grad, wc.grad):
        np.testing.assert_allclose(got.numpy(), wt.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_a_column_scaled_in_place():
    def program(m, w):
        y = w * 1.0
        y[:, 1].mul_(3.0)
        y.view(-1)[:2].add_(1.0)
        return y
    check(program)


def test_a_buffer_filled_through_a_view_gets_the_history():
    def program(m, w):
        buf = m.zeros(3, 4)
        buf[:, 0].copy_(w[:, 1])
        buf[1:, 2:].add_(w[1:, :2] ** 2)
        return buf * 2
    check(program)


def test_a_write_through_data_of_a_view_reaches_its_base_without_history():
    """Found by round 14's tacotron_location (Tacotron 2's attention masks its energies by
    ``alignment = energies.squeeze(-1)``, ``alignment.data.masked_fill_(mask, -inf)``):
    while tracing, the write went to ``alignment`` alone, and its next read replayed the
    squeeze on ``energies``, which lacked it: the compiled softmax ran unmasked, silently.
    Now ``energies`` takes the values too, and neither history changes, as eagerly."""
    def program(m, w):
        energies = (w * 2.0).unsqueeze(-1)
        alignment = energies.squeeze(-1)
        alignment.data.masked_fill_(w > 0.5, -1e4)
        return m.softmax(alignment, dim=1), energies * 1.0

    def detached(m, w):   # (the same through .detach(): it was lost too)
        e = w * 1.0
        a = e[:, 1:]
        a.detach().mul_(10.0)
        return e, a * 1
    check(program)
    check(detached)


def test_a_reshape_that_copies_is_not_a_view():
    def program(m, w):
        y = w * 1.0
        v = y.t().reshape(-1)
        v.add_(100.0)
        return y, v
    check(program)


@pytest.mark.parametrize("write", ["setitem", "add_"])
def test_a_reshape_of_a_tensor_transposed_in_place_copies_with_a_dynamic_dim_too(write):
    """``h.t_()`` then ``h.reshape(-1)`` copies (the strides can't give it), also when the
    batch dim is traced symbolic: a generated program (torch_api seed 86147) wrote through
    the copy into ``h`` at the second batch size (the recorded layout was dropped)."""
    def program(m, x):
        h = x.clone()
        h.t_()
        if write == "setitem":
            h.reshape(-1)[:2] = 3.0
        else:
            h.reshape(-1).add_(100.0)
        return h.t() * 2.0

    compiled = dg.compile(lambda x: program(dg, x))
    for batch in (3, 4, 5):   # (the second size retraces with the batch dim symbolic)
        x = np.arange(batch * 6, dtype=np.float64).reshape(batch, 6)
        want = program(torch, torch.tensor(x)).numpy()
        np.testing.assert_array_equal(program(dg, dg.tensor(x)).numpy(), want)
        np.testing.assert_array_equal(compiled(dg.tensor(x)).numpy(), want)
    assert "symbolic" in compiled.explain()


def test_a_view_taken_before_its_base_changed_reads_the_new_value():
    def program(m, w):
        y = w * 1.0
        first_row, last_col = y[0], y[:, 3]
        y.mul_(2.0)
        last_col.add_(5.0)
        return first_row * 1, y, last_col + 0
    check(program)


def test_setitem_and_views_of_views():
    def program(m, w):
        y = w * 2.0 + 1.0
        y[1][2] = 42.0
        z = y.unsqueeze(0).transpose(1, 2)
        z[0, 1].sub_(w[:, 0])
        return y
    check(program)


def test_writes_through_a_diagonal_reach_its_matrix():
    """``diagonal`` is a view, as torch's (it was an advanced index's copy: the writes were
    lost silently, eager and compiled), also of a transpose and off the main one."""
    def program(m, w):
        y = w * 1.0
        y.diagonal().mul_(3.0)
        y.t().diagonal(-1).add_(w[0, :3])
        y.diagonal(2)[0] = 5.0
        return y, m.diag(y).add_(1.0)   # (diag of a matrix: a copy, as torch's)
    check(program)


def test_batched_diagonals_read_and_written_as_torch():
    """``diagonal`` of any two dims of a batch of matrices (round 13: ``torch.linalg.
    diagonal`` and ``K.diagonal(dim1=-2, dim2=-1)`` raised, 2-d only): a view, so a GP's
    jitter added through it reaches the matrices; values and gradients against torch,
    eager and compiled."""
    def program(m, w):
        k = (w * 1.0).reshape(2, 3, 2).expand(2, 3, 2) * 1.0
        k = m.cat([k, k.flip(-1)], -1)              # (2, 3, 4)
        k.diagonal(dim1=-2, dim2=-1).add_(1e-1)     # (jitter on every matrix)
        k.diagonal(1, 0, 2).mul_(w[0, :2])          # (dims 0 and 2, above the main one)
        return (k, k.diagonal(-1, -1, -2) * 2, m.linalg.diagonal(k, offset=-1).exp(),
                k.diagonal(0, 2, 1).sum(-1))
    check(program)


def test_a_parameters_diagonal_written_under_no_grad_as_torch():
    """The weight-initialisation idiom: ``w.diagonal().fill_(1)`` under ``no_grad``."""
    got = []
    for m in (torch, dg):
        w = m.nn.Parameter(m.tensor(np.arange(12.0).reshape(3, 4)))
        with m.no_grad():
            w.diagonal().fill_(1.0)
            w.diagonal(1).mul_(-1.0)
        got.append(w.detach().numpy())
    np.testing.assert_array_equal(got[1], got[0])


def test_a_saved_output_written_through_a_view_fails_the_backward_as_torch():
    """exp saves its output; writing it through a view must not give a wrong gradient."""
    for lib in (torch, dg):
        w = lib.ones(2, 3, requires_grad=True)
        y = w.exp()
        y[1][2] = 42.0
        with pytest.raises(RuntimeError, match="modified by an in-?place operation"):
            y.sum().backward()


def test_a_view_of_a_leaf_that_requires_grad_is_refused_as_torch_refuses_it():
    for lib in (torch, dg):
        w = lib.ones(2, 3, requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf"):
            w[0].mul_(2.0)
        with lib.no_grad():
            w[0].mul_(2.0)
        assert w.detach().numpy()[0].tolist() == [2.0, 2.0, 2.0]


def test_a_write_to_an_expanded_view_is_refused_eagerly():
    """(Traced, a broadcast is taken for a value made functionally, as a converted loop's
    initial value is, and the write stays in it: eager code can't write one.)"""
    with pytest.raises(RuntimeError, match="read-only"):
        dg.ones(3, 4)[:1].expand(3, 4).add_(1.0)


@pytest.mark.parametrize("write", [
    lambda h: h.expand(2, -1, -1)[1].mul_(2.0),            # a row of the expand: h's memory
    lambda h: h.expand(3, -1, -1)[2, 0].add_(h[0, 1]),
    lambda h: h.expand(1, -1, -1).add_(1.0),                # an expand that broadcasts nothing
    lambda h: h.expand(3, -1, -1)[1].__setitem__((0, 1), 5.0),
    lambda h: h.expand(2, -1, -1).__setitem__((0, slice(None), slice(1, 3)), 0.5)])
def test_a_write_to_a_part_of_an_expand_that_does_not_overlap_reaches_its_tensor(write):
    """torch refuses an in-place write only into memory the written tensor overlaps itself
    (a dim of stride 0 and size > 1); a row of an expanded tensor was refused as read-only
    here, eagerly and compiled. Values and gradients against torch."""
    def program(lib, w):
        h = w.reshape(1, 3, 4) * 1.0
        write(h)
        return h * w.reshape(1, 3, 4)
    check(program)


def test_a_write_to_a_part_of_an_expand_that_overlaps_is_refused_as_torch():
    for lib in (torch, dg):
        with pytest.raises(RuntimeError, match="single memory location"):
            (lib.ones(1, 4) * 1.0).expand(3, 4)[:, 1].mul_(2.0)
    with pytest.raises(RuntimeError, match="single memory location"):
        dg.compile(lambda x: (x * 1.0).expand(3, 4)[:, 1].mul_(2.0))(dg.ones(1, 4))


# -- generated programs -------------------------------------------------------------------
VIEWS = ["slice", "transpose", "reshape", "unsqueeze", "select", "narrow", "diagonal"]
WRITES = ["add_", "mul_", "copy_", "setitem", "zero_"]


def _view(m, x, kind, r):
    """One view of ``x`` of ``kind``, drawn with ``r`` (the same draw for both libraries)."""
    if x.ndim == 0:
        return x
    dim = r.randrange(x.ndim)
    n = x.shape[dim]
    if kind == "slice" and n > 1:
        start = r.randrange(n - 1)
        index = [slice(None)] * x.ndim
        index[dim] = slice(start, n, r.choice([1, 2]))
        return x[tuple(index)]
    if kind == "transpose" and x.ndim > 1:
        return x.transpose(dim, (dim + 1) % x.ndim)
    if kind == "reshape":
        return x.reshape(-1)
    if kind == "unsqueeze":
        return x.unsqueeze(dim)
    if kind == "select" and x.ndim > 1:
        return x.select(dim, r.randrange(n))
    if kind == "narrow" and n > 1:
        return x.narrow(dim, 1, n - 1)
    if kind == "diagonal" and x.ndim == 2:
        return x.diagonal(r.randrange(-1, 2))
    return x


def _generated(seed: int):
    def program(m, w):
        r = random.Random(seed)
        y = w * 1.5
        early = _view(m, y, r.choice(VIEWS), r)   # taken before the write
        v = y
        for _ in range(r.randint(1, 3)):
            v = _view(m, v, r.choice(VIEWS), r)
        write = r.choice(WRITES)
        if write == "add_":
            v.add_(w.sum() if r.random() < 0.5 else 1.0)
        elif write == "mul_":
            v.mul_(w.mean())
        elif write == "copy_":
            v.copy_(v.detach() * 0 + w.max())
        elif write == "setitem" and v.ndim:
            v[0] = 7.0
        else:
            v.zero_()
        return y, early + 0, v * 1
    return program


@pytest.mark.parametrize("seed", range(40))
def test_generated_write_through_views_matches_torch(seed):
    check(_generated(seed))


@pytest.mark.parametrize("act", ["leaky_relu", "hardtanh", "elu", "silu", "hardswish", "relu"])
def test_inplace_activation_after_a_layer_differentiates_as_torch(act):
    """Found by a DCGAN (tests/torch_programs/dcgan.py): ``LeakyReLU(0.2, inplace=True)``
    after BatchNorm failed backward's version check (its where() and mul nodes kept the
    overwritten input), where torch differentiates in-place activations from their result."""
    rng = np.random.default_rng(0)
    x0, w0 = rng.standard_normal((4, 3)), rng.standard_normal((3, 3))
    grads = []
    for lib in (dg, torch):
        x = lib.tensor(x0, requires_grad=True)
        w = lib.tensor(w0, requires_grad=True)
        h = lib.nn.functional.batch_norm(x @ w, None, None, training=True)
        y = getattr(lib.nn.functional, act)(h, inplace=True)
        (y * y).sum().backward()
        grads.append((x.grad.numpy(), w.grad.numpy()))
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_einsum_of_two_operands_gives_a_contiguous_tensor():
    """``einsum('bi,ij->bj', h, w).view(-1, 3)``: NumPy's optimised einsum left the output
    in its GEMM's layout (strides ``(1, B)``), so the view raised where torch's result is
    contiguous (generated torch-API program 253)."""
    h, w = np.arange(30.0).reshape(5, 6), np.arange(36.0).reshape(6, 6) / 10
    want = torch.einsum("bi,ij->bj", torch.tensor(h), torch.tensor(w)).view(-1, 3).numpy()
    fn = dg.compile(lambda a, b: dg.einsum("bi,ij->bj", a, b).view(-1, 3))
    eager = dg.einsum("bi,ij->bj", dg.tensor(h), dg.tensor(w))
    assert eager.is_contiguous()
    for got in (eager.view(-1, 3), fn(dg.tensor(h), dg.tensor(w))):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    assert dg.einsum("bij,bjk->bik", dg.ones(2, 2, 3), dg.ones(2, 3, 2)).is_contiguous()


@pytest.mark.parametrize("method", ["t_", "transpose_", "swapdims_", "unsqueeze_",
                                    "squeeze_"])
def test_a_saved_tensor_reshaped_in_place_fails_the_backward_as_torch(method):
    """``h.t_()`` of a square ``h`` that ``y = h * w`` saved: the gradient of ``w`` read the
    transposed values (silently wrong, eagerly); torch moves the version on and refuses."""
    args = {"t_": (), "transpose_": (0, 1), "swapdims_": (0, 1), "unsqueeze_": (0,),
            "squeeze_": ()}[method]
    for lib in (torch, dg):
        w = lib.tensor(np.cos(np.arange(9.0)).reshape(3, 3), requires_grad=True)
        h = lib.tensor(np.arange(9.0).reshape(3, 3)) * 1.0
        y = h * w
        getattr(h, method)(*args)
        with pytest.raises(RuntimeError, match="modified by an in-?place operation"):
            y.sum().backward()


def test_a_traced_in_place_transpose_keeps_its_strides_as_eagerly():
    """``h.squeeze_(0).t_(); h.view(-1)``: eagerly (and in torch) ``h`` is a transposed,
    non-contiguous view, so ``view`` refuses; traced, ``h`` kept no strides and the compiled
    function returned row-major values instead (also those of the gradient's path). Now the
    tracer records the strides (``views.root_layout``): compiled raises as eager does, and
    ``is_contiguous`` / ``reshape`` / ``contiguous().view`` read as eagerly."""
    x0 = np.arange(6, dtype=np.float32).reshape(1, 2, 3)

    def refused(lib, x, w):
        h = x * w
        h.squeeze_(0).t_()
        return h.view(-1)

    def allowed(lib, x, w):
        h = x * w
        h.squeeze_(0).t_()
        return h.reshape(-1) + h.contiguous().view(-1) * float(h.is_contiguous() + 2)
    for grad in (False, True):
        w0 = np.full((1, 2, 3), 1.5, np.float32)
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            refused(torch, torch.tensor(x0), torch.tensor(w0, requires_grad=grad))
        for fn in (lambda x, w: refused(dg, x, w), dg.compile(lambda x, w: refused(dg, x, w))):
            with pytest.raises(RuntimeError, match="view size is not compatible"):
                fn(dg.tensor(x0), dg.tensor(w0, requires_grad=grad))
        want = allowed(torch, torch.tensor(x0), torch.tensor(w0, requires_grad=grad))
        for fn in (lambda x, w: allowed(dg, x, w), dg.compile(lambda x, w: allowed(dg, x, w))):
            got = fn(dg.tensor(x0), dg.tensor(w0, requires_grad=grad))
            np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())


@pytest.mark.parametrize("make", [
    lambda x: x[0], lambda x: x.t(), lambda x: (x[1:].unsqueeze(0).squeeze(0), x.sum()),
    lambda x: x.diagonal(), lambda x: x.chunk(3, 1)[1], lambda x: x.unbind(0),
])
def test_a_compiled_output_that_is_a_view_of_an_input_shares_its_memory(make):
    """``return x[0]`` from a compiled function gives a view of ``x`` itself, as eager (and
    torch.compile) give: a write through the output shows in ``x`` and one to ``x`` in the
    output. Before, the call returned a copy, and such a write was lost silently."""
    f = dg.compile(make)
    for _ in range(2):
        x, want_x = dg.ones(3, 3), dg.ones(3, 3)
        got, want = _outputs(f(x)), _outputs(make(want_x))
        for g, w in zip(got, want):
            g.add_(1)
            w.add_(1)
        x.mul_(3)
        want_x.mul_(3)
        np.testing.assert_array_equal(x.numpy(), want_x.numpy())
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())


def test_a_compiled_view_of_symbolic_sizes_shares_its_input_at_each_size():
    """At batch sizes the graph takes as a symbolic dim, the view is made at the call's
    sizes: ``x.reshape(-1)[1:]`` is of ``x`` itself at every batch size."""
    f = dg.compile(lambda x: x.reshape(-1)[1:])
    for n in (2, 3, 4, 5):
        x = dg.zeros(n, 3)
        y = f(x)
        y.add_(1)
        assert y.shape == (3 * n - 1,) and x.sum().item() == 3 * n - 1
    assert "with that dim symbolic" in f.explain() and len(f.cache) == 2


def test_a_compiled_view_of_a_written_input_or_parameter_is_theirs_with_its_gradient():
    """The view of a tensor the call wrote in place (``x.mul_(2); return x[0]``) is of
    ``x`` after the write; a parameter's view (``self.w.t()``) shares the parameter and
    carries its gradient back, as eagerly."""
    def scale_then_row(x):
        x.mul_(2)
        return x[0]

    f = dg.compile(scale_then_row)
    x = dg.ones(2, 3)
    for _ in range(2):
        f(x).add_(1)
    np.testing.assert_array_equal(x.numpy(), [[7.0] * 3, [4.0] * 3])

    class Tied(dg.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = dg.nn.Parameter(dg.arange(6.0).reshape(2, 3))

        def forward(self, x):
            return self.w.t(), x @ self.w.t()

    model = Tied()
    compiled = dg.compile(model)
    for _ in range(2):
        model.w.grad = None
        wt, y = compiled(dg.ones(4, 3))
        assert np.shares_memory(wt.detach().numpy(), model.w.detach().numpy())
        (wt * dg.arange(6.0).reshape(3, 2)).sum().add(y.sum()).backward()
        want = dg.arange(6.0).reshape(3, 2).t() + 4.0
        np.testing.assert_array_equal(model.w.grad.numpy(), want.numpy())
