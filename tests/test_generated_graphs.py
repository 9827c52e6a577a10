"""Differential test of ``dg.compile`` on generated tensor programs.

Each program is a random chain of the ops real model code is made of: elementwise math
with broadcasting against every kind of partner (same shape, a row, a column, a reduced
``keepdim`` result, a Python number), reductions, softmax and layer norm, views
(transpose, permute, slices with steps, reshape, unsqueeze + expand), concatenation and
stacking, matrix products, ``where`` with a comparison, clamps, sorts and top-k, gathers
and indexing by integer and boolean tensors, dtype changes, Python numbers read from
tensors (``.item()``, ``float()``, a branch on a tensor's value: graph breaks), and
in-place updates of intermediate tensors and of the arguments (also through a view). The generator runs each statement eagerly
as it writes it, so it knows every shape and picks only valid operands; a program is
Python source, printed in full when a check fails.

Every program runs eagerly and under ``dg.compile`` (forward values, and gradients of a
loss through the program both inside the compiled function and through its outputs),
on two calls with fresh values of the same shapes and a third call with another leading
dimension; compiled results must equal eager's (float32: rtol 1e-4, atol 1e-5; float64:
1e-9). A compiled result that silently differs is a failure; so is a crash in one mode
that the other does not have, but for eager's in-place version check, which a compiled
backward does not need (docs/capture.md, "One difference from eager").

``DG_GRAPH_EXAMPLES`` sets the programs per mode, from seed ``DG_GRAPH_FIRST`` (CI: 60 from
0, seeded; a campaign on new seeds sets both; a failing id is
reproducible: ``pytest tests/test_generated_graphs.py -k 'forward-17'``).
"""
from __future__ import annotations

import os
import random
import textwrap

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn.functional as F

EXAMPLES = int(os.environ.get("DG_GRAPH_EXAMPLES", "60"))
FIRST = int(os.environ.get("DG_GRAPH_FIRST", "0"))

UNARY = [
    "{x}.neg()", "{x}.abs()", "{x}.clamp(-3, 3).exp()", "({x}.abs() + 1).log()",
    "({x}.abs() + 0.5).sqrt()", "{x}.tanh()", "{x}.sigmoid()", "F.relu({x})",
    "F.gelu({x})", "F.gelu({x}, approximate='tanh')", "F.silu({x})", "{x}.sin()",
    "{x}.cos()", "{x} * {x}", "{x}.pow(2)", "{x}.pow(3)", "({x}.abs() + 0.1).pow(0.5)",
    "({x}.abs() + 1).reciprocal()", "F.softplus({x})", "F.leaky_relu({x}, 0.1)",
    "F.elu({x})", "F.hardswish({x})", "F.relu6({x} * 3)", "{x}.clamp(min=-0.5)",
    "{x}.clamp(-1.0, 0.7)", "({x}.abs() + 0.5).rsqrt()", "F.hardtanh({x})",
    "{x}.erf()", "F.mish({x})", "{x}.square()", "2.0 * {x} - 1.0",
]
BINARY = ["{x} + {y}", "{x} - {y}", "{x} * {y}", "{x} / ({y}.abs() + 1)",
          "dg.maximum({x}, {y})", "dg.minimum({x}, {y})",
          "dg.where({x} > {y}, {x}, {y} * 2)", "{x} * {y}.sigmoid()"]
REDUCE = ["{x}.sum(dim={d}, keepdim=True)", "{x}.mean(dim={d}, keepdim=True)",
          "{x}.amax(dim={d}, keepdim=True)", "{x}.sum(dim={d})", "{x}.mean(dim={d})",
          "F.softmax({x}, dim={d})", "F.log_softmax({x}, dim={d})",
          "{x}.var(dim={d}, keepdim=True)", "{x}.cumsum(dim={d})",
          "({x} - {x}.mean(dim={d}, keepdim=True))"]
SHAPED = [   # further ops real code uses: some change the shape, some read indices
    "{x}.flip(0)", "{x}.roll(1, 0)", "{x}.masked_fill({x} > 0.5, 0.0)",
    "{x}.logsumexp(dim={d}, keepdim=True)", "{x}.std(dim={d}, keepdim=True)",
    "{x}.norm(dim={d}, keepdim=True)", "{x}.prod(dim={d}, keepdim=True)",
    "{x}.sort(dim={d})[0]", "{x}.sort(dim={d}, descending=True)[0]", "{x}.max(dim={d})[0]",
    "{x}.min(dim={d}, keepdim=True).values", "dg.stack([{x}, {x}.sin()], dim={d})",
    "{x}.chunk(2, dim={d})[0]", "{x}.split(1, dim={d})[-1]",
    "{x}.gather({d}, {x}.argmax(dim={d}, keepdim=True))", "{x}[{x}.argmax(dim=0)]",
    "{x}.index_select(0, dg.tensor([0, 0, 1]))", "{x}[{x} > 0].sum() * {x}",
    "{x}.unsqueeze(-1) * {x}.unsqueeze(-2)", "dg.where({x} > 0, {x}, 0.0)",
    "{x}.detach() * {x}", "{x}.squeeze(0).unsqueeze(0)", "{x}.cumprod(dim={d})",
    "{x} * {x}.abs().max().item()", "({x} * 2 if {x}.sum() > 0 else {x} * 3)",
    "{x} * float({x}.mean())", "{x}[..., dg.tensor([True, False] * 2)[:{x}.shape[-1]]]",
    "{x}.topk(1, dim={d})[0]", "dg.clamp({x}, min={x}.mean())", "{x}.sum() + {x}",
    "{x}.abs().amin(dim={d}, keepdim=True)", "{x}.t().contiguous().t()",
    "F.pad({x}, (1, 2))", "F.pad({x}, (1, 1), value=0.5)", "F.normalize({x}, dim={d})",
    "dg.einsum('...i,...i->...', {x}, {x})", "dg.bmm({x}, {x}.transpose(-1, -2))",
    "{x}.scatter_add({d}, {x}.argsort(dim={d}), {x})", "{x}.argsort(dim={d}).to({x}.dtype)",
    "{x}.repeat(2, *[1] * ({x}.ndim - 1))", "{x}.sign() * {x}.abs().sqrt()",
    "{x}.round() + {x}.floor() - {x}.ceil()", "{x}.remainder(1.0)", "{x}.expm1()",
    "dg.atan2({x}, {x}.flip(0))", "{x}.log1p().nan_to_num()", "F.dropout({x}, p=0.0)",
    "{x}.new_zeros({x}.shape).index_add(0, dg.tensor([0, 0]), {x}[:2])",
    "{x}.masked_fill({x} < {x}.mean(), float('-inf')).softmax(dim=-1)",
    "dg.tril({x})", "dg.triu({x}, 1)", "{x}.diagonal(dim1=-2, dim2=-1)",
    "{x}.nan_to_num(posinf=1.0) * ({x} > 0)", "({x} > 0).float() * {x}",
]
INPLACE = ["{x}.add_(1.0)", "{x}.mul_(0.5)", "{x}.clamp_(-2, 2)", "{x}.relu_()",
           "{x}.sub_({y})", "{x}.mul_({y})"]


class Generator:
    """Writes one program statement by statement, running each eagerly to know shapes."""

    def __init__(self, seed: int, dtype):
        self.r = random.Random(seed)
        self.dtype = dtype
        self.lines: list[str] = []
        self.env = {"dg": dg, "F": F}
        self.names: list[str] = []
        self.count = 0
        rows = self.r.choice([3, 4, 5])
        self.input_shapes = [(rows,) + shape for shape in
                             self.r.choice([[(4,), (4,)], [(3, 4), (4,)], [(2, 3), (3,)],
                                            [(4,), (1,)], [(2, 4), (2, 4)]])]
        rng = np.random.default_rng(seed)
        self.inputs = [dg.tensor(rng.standard_normal(s), dtype=dtype) for s in self.input_shapes]
        for i, value in enumerate(self.inputs):
            self.env[f"x{i}"] = value
            self.names.append(f"x{i}")

    def shape(self, name):
        return tuple(self.env[name].shape)

    def emit(self, expr: str) -> None:
        """Run ``name = expr`` eagerly; keep it when it runs and gives a small float tensor."""
        name = f"t{self.count}"
        try:
            value = eval(expr, self.env)
        except Exception:
            return
        if not isinstance(value, dg.Tensor) or value.ndim == 0 or value.numel() > 4096 \
                or not value.dtype.is_floating_point:
            return
        self.count += 1
        self.env[name] = value
        self.names.append(name)
        self.lines.append(f"{name} = {expr}")

    def partner(self, x: str) -> str:
        """An operand that broadcasts against ``x``."""
        shape = self.shape(x)
        same = [n for n in self.names if self.shape(n) == shape and n != x]
        kind = self.r.choice(["same", "row", "column", "number", "reduced"])
        if kind == "same" and same:
            return self.r.choice(same)
        if kind == "number":
            return repr(round(self.r.uniform(-2, 2), 3))
        if kind == "reduced":
            d = self.r.randrange(len(shape))
            return f"{x}.mean(dim={d}, keepdim=True)"
        rows = [n for n in self.names if self.shape(n) == shape[-1:]]
        if kind == "row" and rows:
            return self.r.choice(rows)
        if kind == "column" and len(shape) >= 2:
            return f"{x}[..., :1]"
        return x

    def view(self, x: str) -> str:
        shape = self.shape(x)
        n = len(shape)
        options = [f"{x}.reshape(-1)", f"{x}.unsqueeze(0)", f"{x}[1:]"]
        if n >= 2:
            options += [f"{x}.transpose(0, 1)", f"{x}.t()" if n == 2 else f"{x}.transpose(-1, -2)",
                        f"{x}[:, ::2]", f"{x}.reshape({x}.shape[0], -1)",
                        f"{x}.unsqueeze(1).expand(-1, 2, *{x}.shape[1:]).reshape("
                        f"{x}.shape[0] * 2, *{x}.shape[1:])"]
        if n == 3:
            options += [f"{x}.permute(2, 0, 1)", f"{x}[:, 1, :]", f"{x}.flatten(1)"]
        return self.r.choice(options)

    def statement(self) -> None:
        x = self.r.choice(self.names[-4:] + self.names)
        shape = self.shape(x)
        kind = self.r.choices(
            ["unary", "binary", "reduce", "view", "cat", "matmul", "norm", "cast", "inplace",
             "shaped", "write_arg"],
            weights=[6, 6, 3, 3, 1, 2, 1, 1, 2, 4, 1])[0]
        if kind == "shaped":
            self.emit(self.r.choice(SHAPED).format(x=x, d=self.r.randrange(-len(shape), len(shape))))
        elif kind == "write_arg":   # in place into an argument (also through a view)
            target = self.r.choice(self.names[:len(self.inputs)])
            write = self.r.choice(["{x}.add_(0.5)", "{x}.mul_(-1.0)", "{x}[0] = 3.0",
                                   "{x}[..., :1].zero_()", "{x}.clamp_(max=0.5)"]
                                  ).format(x=target)
            try:
                exec(write, self.env)
            except Exception:
                return
            self.lines.append(write)
        elif kind == "unary":
            self.emit(self.r.choice(UNARY).format(x=x))
        elif kind == "binary":
            y = self.partner(x)
            first, second = (x, y) if self.r.random() < 0.7 else (y, x)
            self.emit(self.r.choice(BINARY).format(x=first, y=second))
        elif kind == "reduce":
            self.emit(self.r.choice(REDUCE).format(x=x, d=self.r.randrange(-len(shape), len(shape))))
        elif kind == "view":
            self.emit(self.view(x))
        elif kind == "cat":
            self.emit(f"dg.cat([{x}, {x} * 0.5], dim={self.r.randrange(len(shape))})")
        elif kind == "matmul":
            others = [n for n in self.names if self.shape(n)[-1] == shape[-1]]
            y = self.r.choice(others)
            self.emit(f"{x} @ {y}.transpose(-1, -2)" if len(self.shape(y)) >= 2 else f"{x} @ {y}")
        elif kind == "norm":
            self.emit(f"F.layer_norm({x}, {x}.shape[-1:])")
        elif kind == "cast":
            other = "dg.float64" if self.dtype == dg.float32 else "dg.float32"
            self.emit(f"({x}.to({other}) * 1.5).to({x}.dtype)")
        else:
            target = f"t{self.count}"
            self.emit(f"{x} * 1.0")             # a fresh intermediate to write into
            if target not in self.env:
                return
            y = self.partner(target)
            write = self.r.choice(INPLACE).format(x=target, y=y)
            if self.r.random() < 0.3 and len(self.shape(target)) >= 2:
                write = self.r.choice(["{x}[0].add_(2.0)", "{x}[:, 0].mul_(-1.0)",
                                       "{x}[..., 1:].zero_()"]).format(x=target)
            try:
                exec(write, self.env)
            except Exception:
                return
            self.lines.append(write)

    def program(self, statements: int) -> str:
        while self.count < statements:
            before = len(self.lines)
            self.statement()
            if len(self.lines) == before and self.r.random() < 0.05:
                break
        outputs = self.r.sample(self.names[len(self.inputs):], k=min(2, self.count)) or ["x0"]
        if self.names[-1] not in outputs:
            outputs.append(self.names[-1])
        body = "\n".join(self.lines + ["return " + ", ".join(outputs)])
        args = ", ".join(f"x{i}" for i in range(len(self.inputs)))
        return f"def program({args}):\n{textwrap.indent(body, '    ')}\n"


def build(seed: int, dtype):
    gen = Generator(seed, dtype)
    source = gen.program(statements=gen.r.randint(4, 12))
    namespace = {"dg": dg, "F": F}
    exec(compile(source, f"<generated program {seed}>", "exec"), namespace)
    return source, namespace["program"], gen.input_shapes


def fresh_inputs(shapes, seed, dtype, rows=None, requires_grad=False):
    rng = np.random.default_rng(seed)
    return [dg.tensor(rng.standard_normal(((rows,) + s[1:]) if rows else s), dtype=dtype,
                      requires_grad=requires_grad) for s in shapes]


def loss_of(outputs):
    total = 0
    for i, out in enumerate(outputs):
        total = total + (out * (i + 1.5)).sin().sum()
    return total


def tolerances(dtype):
    return (1e-4, 1e-5) if dtype == dg.float32 else (1e-9, 1e-10)


def assert_same(eager, compiled, source, what, dtype):
    rtol, atol = tolerances(dtype)
    assert len(eager) == len(compiled), source
    for i, (e, c) in enumerate(zip(eager, compiled)):
        if e is None or c is None:
            assert e is None and c is None, f"{what} {i}: one is None\n{source}"
            continue
        assert tuple(e.shape) == tuple(c.shape), f"{what} {i}: shapes\n{source}"
        assert e.dtype == c.dtype, f"{what} {i}: dtypes {e.dtype} {c.dtype}\n{source}"
        np.testing.assert_allclose(c.detach().numpy(), e.detach().numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"{what} {i} differs\n{source}")


def as_tuple(value):
    return value if isinstance(value, tuple) else (value,)


def calls(shapes):
    """(seed, rows) of each checked call: two of the traced shape, one of another."""
    return [(1, None), (2, None), (3, shapes[0][0] + 2)]


def run_both(eager_call, compiled_call, source):
    """Both calls' results, or None when eager raises (another leading dimension can make
    a generated program invalid: its partners were picked by shape); compiled must then
    raise too."""
    try:
        eager = eager_call()
    except Exception as error:
        if "modified by an in-place operation" in str(error):
            compiled_call()   # (compiled keeps every value: docs/capture.md, "One difference")
            return None
        with pytest.raises(Exception):
            compiled_call()
        print(f"eager raised {type(error).__name__}; so did compiled\n{source}")
        return None
    return eager, compiled_call()


def check_forward(seed, dtype, shapes_of_calls, **options):
    """The program of ``seed`` compiled with ``options`` against eager, on calls of
    ``(seed, leading size or None)`` from ``shapes_of_calls(shapes)``: its outputs, then
    its arguments (a program may write into them)."""
    source, program, shapes = build(seed, dtype)
    compiled = dg.compile(program, **options)
    for call_seed, rows in shapes_of_calls(shapes):
        def run(fn):
            inputs = fresh_inputs(shapes, call_seed, dtype, rows)
            return as_tuple(fn(*inputs)) + tuple(inputs)

        both = run_both(lambda: run(program), lambda: run(compiled), source)
        if both:
            assert_same(*both, source, f"call {call_seed}: outputs and arguments", dtype)


@pytest.mark.parametrize("dtype", [dg.float32, dg.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("seed", range(FIRST, FIRST + EXAMPLES))
def test_forward(seed, dtype):
    check_forward(seed, dtype, calls)


@pytest.mark.parametrize("seed", range(FIRST, FIRST + EXAMPLES))
def test_forward_with_a_dynamic_leading_dim(seed):
    """``dynamic=True``: one graph with symbolic dims for calls of several leading sizes."""
    check_forward(seed, dg.float32, lambda shapes: [
        (1, None), (2, shapes[0][0] + 1), (3, shapes[0][0] + 3), (4, None)], dynamic=True)


@pytest.mark.parametrize("seed", range(FIRST, FIRST + EXAMPLES))
def test_forward_with_automatic_dynamic_dims(seed):
    """No ``dynamic=``: the leading size changes, so that dim is traced symbolic (or, where
    an op can't keep it so, the function keeps static graphs): calls of several sizes, back
    to the traced one, and 1 (which stays a number)."""
    check_forward(seed, dg.float32, lambda shapes: [
        (1, None), (2, shapes[0][0] + 1), (3, shapes[0][0] + 3), (4, None), (5, 1),
        (6, shapes[0][0] + 1)])


@pytest.mark.parametrize("seed", range(FIRST, FIRST + EXAMPLES))
def test_backward_inside(seed):
    """The loss's backward inside the compiled function: gradients of the inputs."""
    dtype = dg.float64
    source, program, shapes = build(seed, dtype)

    def step(*inputs):
        loss = loss_of(as_tuple(program(*inputs)))
        loss.backward()
        return loss

    compiled = dg.compile(step)
    for call_seed, rows in calls(shapes):
        def run(fn):
            inputs = fresh_inputs(shapes, call_seed, dtype, rows, requires_grad=True)
            loss = fn(*inputs)
            return [loss.detach()] + [x.grad for x in inputs]

        both = run_both(lambda: run(step), lambda: run(compiled), source)
        if both:
            assert_same(*both, source, f"call {call_seed}: loss and gradient", dtype)


@pytest.mark.parametrize("seed", range(FIRST, FIRST + EXAMPLES))
def test_backward_through_outputs(seed):
    """The loss's backward outside, through the compiled function's outputs."""
    dtype = dg.float64
    source, program, shapes = build(seed, dtype)
    compiled = dg.compile(program)
    for call_seed, rows in calls(shapes):
        def run(fn):
            inputs = fresh_inputs(shapes, call_seed, dtype, rows, requires_grad=True)
            outputs = as_tuple(fn(*inputs))
            differentiable = [o for o in outputs if o.requires_grad]
            if differentiable:
                loss_of(differentiable).backward()
            return [x.grad for x in inputs]

        both = run_both(lambda: run(program), lambda: run(compiled), source)
        if both:
            assert_same(*both, source, f"call {call_seed}: gradient", dtype)


# -- what the generator found, as named cases -------------------------------------------------
def test_gradient_of_a_tensor_argument_at_every_call():
    """A leaf passed as an argument, backward inside the compiled step: each call's own
    argument gets its gradient (the traced call's tensor did, and later arguments kept
    None); an argument with a gradient accumulates as in eager; cleared, it starts anew."""
    def step(x, w):
        loss = ((x @ w).tanh() ** 2).sum()
        loss.backward()
        return loss

    rng = np.random.default_rng(0)
    xs0, w0 = [rng.standard_normal((4, 3)) for _ in range(6)], rng.standard_normal((3, 2))
    grads = []
    for fn in (step, dg.compile(step)):
        w = dg.tensor(w0, requires_grad=True)
        seen = []
        for i, x0 in enumerate(xs0):
            x = dg.tensor(x0, requires_grad=True)
            fn(x, w)
            if i % 2:
                fn(x, w)                        # x's gradient accumulates
            if i == 3:
                x.grad, w.grad = None, None     # cleared: made anew
                fn(x, w)
            seen.append((x.grad.numpy().copy(), w.grad.numpy().copy()))
        grads.append(seen)
    for (xe, we), (xc, wc) in zip(*grads):
        np.testing.assert_allclose(xc, xe, rtol=1e-12)
        np.testing.assert_allclose(wc, we, rtol=1e-12)


def test_an_argument_returned_as_it_is_is_the_argument():
    """``return x, x * 2``: eager returns x itself, so a loss through it reaches x; the
    compiled call returned a fresh tensor without history (the gradient lost its part)."""
    def program(x):
        return x, x * 2.0

    compiled = dg.compile(program)
    for _ in range(2):
        x = dg.tensor(np.ones((2, 2)), requires_grad=True)
        same, double = compiled(x)
        assert same is x
        (same * 1.0 + double * 10.0).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 2), 21.0))


@pytest.mark.parametrize("c, d, folded", [(2, 3, True), (3.0, 0.5, False), (0.1, 3, False),
                                          (4.0, -1.5, True)])
def test_scale_chains_fold_only_when_exact(c, d, folded):
    """``(x*c)*d -> x*(c*d)`` rounds once where the chain rounds twice: it applies only
    where both give the same bits (one factor a power of two, neither below 1 in size)."""
    def program(x):
        return (x * c) * d

    compiled = dg.compile(program)
    x = dg.tensor(np.random.default_rng(0).standard_normal(1000), dtype=dg.float32)
    np.testing.assert_array_equal(compiled(x).numpy(), program(x).numpy())
    assert ("x*(c*d)" in compiled.explain()) == folded


@pytest.mark.parametrize("case", ["contiguous_then_write_base", "write_the_contiguous_copy",
                                  "reshape_copy_then_write_base", "is_contiguous"])
def test_contiguous_and_copying_reshapes_are_copies_when_traced(case):
    """Traced values had no layout: ``contiguous()`` returned the tensor itself and a
    reshape that copies eagerly stayed a view, so a write to the base reached the "copy"
    (or a write to the copy reached the argument) only when compiled."""
    def program(x):
        if case == "contiguous_then_write_base":
            t = x.t().contiguous().t()
            x[0] = 3.0
            return F.layer_norm(t, t.shape[-1:])
        if case == "write_the_contiguous_copy":
            h = x.t().contiguous()
            h[0] = 0.0
            return h * 1
        if case == "reshape_copy_then_write_base":
            t = x.t().reshape(-1)
            x[0] = 3.0
            return t * 1
        return dg.tensor([float(x.is_contiguous()), float(x.t().is_contiguous()),
                          float(x[:1].is_contiguous())])

    a = np.random.default_rng(0).standard_normal((4, 4))
    xe, xc = dg.tensor(a), dg.tensor(a)
    expected, got = program(xe), dg.compile(program)(xc)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    np.testing.assert_array_equal(xc.numpy(), xe.numpy())


def test_a_value_a_split_call_computed_keeps_its_gradient_when_returned():
    """A graph break (a branch on a tensor) splits the call; ``t`` from the first piece,
    returned as it is, must stay on the tape (the whole call's backward covers it)."""
    def program(x):
        t = x * 1.5
        u = t * 2 if t.sum() > 0 else t * 3
        return u, t

    compiled = dg.compile(program)
    for sign in (1, -1, 1):
        grads = []
        for fn in (program, compiled):
            x = dg.tensor(np.full(3, float(sign)), requires_grad=True)
            u, t = fn(x)
            (u * 10 + t).sum().backward()
            grads.append(x.grad.numpy())
        np.testing.assert_array_equal(grads[1], grads[0])


def test_symbolic_dims_a_trace_cannot_keep_fall_back_to_static_shapes():
    """``dynamic=True`` with an op whose shape rule needs the dim as a number (a strided
    slice of the dynamic dim; ``x[1:]`` is ``B - 1`` now) raised a TypeError from inside
    the trace; now the function warns, naming the line, and traces with static shapes
    (one graph per shape)."""
    def program(x):
        return x[::2] * 2

    compiled = dg.compile(program, dynamic=True)
    with pytest.warns(UserWarning, match="symbolic dims.*static shapes"):
        compiled(dg.ones(3, 2))
    for n in (3, 4, 6):
        x = dg.tensor(np.arange(n * 2.0).reshape(n, 2))
        np.testing.assert_array_equal(compiled(x).numpy(), program(x).numpy())
    report = compiled.explain()
    assert "symbolic dims given up at" in report and "test_generated_graphs.py" in report


@pytest.mark.parametrize("seed", range(FIRST, FIRST + EXAMPLES, 2))
def test_calls_that_switch_signatures(seed):
    """One compiled function called with a random sequence of signatures (dtype, leading
    size, requires_grad, grad mode): each call takes the graph its guards select (or
    traces one), on the fast path or the general one, and equals eager."""
    source, _, shapes = build(seed, dg.float64)
    namespace = {"dg": dg, "F": F}
    exec(compile(source, f"<generated program {seed}>", "exec"), namespace)
    program = namespace["program"]
    compiled = dg.compile(program)
    r = random.Random(seed)
    for call in range(8):
        dtype = r.choice([dg.float32, dg.float64])
        rows = r.choice([None, None, shapes[0][0] + 1])
        grad = r.random() < 0.5
        no_grad = r.random() < 0.3

        def run(fn):
            inputs = fresh_inputs(shapes, call, dtype, rows, requires_grad=grad)
            if no_grad:
                with dg.no_grad():
                    return list(as_tuple(fn(*inputs)))
            outputs = as_tuple(fn(*inputs))
            differentiable = [o for o in outputs if o.requires_grad]
            if differentiable:
                loss_of(differentiable).backward()
            return list(outputs) + [x.grad for x in inputs]

        both = run_both(lambda: run(program), lambda: run(compiled), source)
        if both:
            assert_same(*both, source, f"call {call} ({dtype}, rows {rows}, grad {grad}, "
                        f"no_grad {no_grad})", dtype)


def test_an_argument_whose_gradient_the_step_clears_itself():
    """``x.grad = None`` inside the step, then backward: the traced call had no gradient,
    later calls have the previous one, which the step replaces unread (the check for an
    argument traced without a gradient retraced forever here)."""
    def step(x):
        y = x
        for _ in range(3):
            y = y * 0.9 + 0.1 * dg.sin(y)
        loss = y.sum()
        x.grad = None
        loss.backward()
        return loss

    compiled = dg.compile(step)
    xs = [dg.tensor(np.linspace(0, 1, 5), requires_grad=True) for _ in range(2)]
    for _ in range(4):
        losses = [float(fn(x)) for fn, x in zip((step, compiled), xs)]
        assert losses[0] == losses[1]
        np.testing.assert_array_equal(xs[1].grad.numpy(), xs[0].grad.numpy())
    assert len(compiled.cache) == 1
