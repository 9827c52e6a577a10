"""An average pool after a 1x1 conv, pooled first (the lowering rule ``pool_before_conv``,
``passes/pool_first.py``): compiled against eager and torch on odd planes, batch 1 and 3,
ceil mode, padding counted in the divisor or not, a divisor override, groups, with and
without a bias and a BatchNorm-ReLU before the conv (DenseNet's transition), a symbolic
batch; and the places the rule must leave alone: a bias whose windows' divisors differ
from their counts, a conv another node reads too, a 3x3 conv, a pool that does not shrink
the plane."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dualgraph as dg  # noqa: E402
import dualgraph.nn.functional as F  # noqa: E402

POOLS = {
    "2x2/2": dict(kernel_size=2, stride=2),
    "3x3/2 ceil": dict(kernel_size=3, stride=2, ceil_mode=True),
    "3x3/2 p1": dict(kernel_size=3, stride=2, padding=1),
    "3x3/2 p1 uncounted ceil": dict(kernel_size=3, stride=2, padding=1,
                                    count_include_pad=False, ceil_mode=True),
    "2x2/2 override": dict(kernel_size=2, stride=2, divisor_override=3),
    "3x3/1 p1": dict(kernel_size=3, stride=1, padding=1),       # (no shrink: left alone)
}


def _rewritten(compiled) -> int:
    """How many pools the compiled function's passes moved before their conv."""
    (entry,) = compiled.cache.values()
    return sum(item.startswith("pool_before_conv: ") for r in entry.reports
               for item in r.items)


def _data(n, c, h, w, cout, groups, seed=0):
    r = np.random.default_rng(seed)
    x = r.standard_normal((n, c, h, w)).astype(np.float32)
    weight = r.standard_normal((cout, c // groups, 1, 1)).astype(np.float32)
    return x, weight, r.standard_normal(cout).astype(np.float32), r.standard_normal(
        (4, c)).astype(np.float32)


@pytest.mark.parametrize("pool", POOLS, ids=list(POOLS))
@pytest.mark.parametrize("bias", (True, False), ids=("bias", "no bias"))
@pytest.mark.parametrize("shape", [(1, 12, 13, 11, 7, 1), (3, 16, 9, 10, 24, 2)],
                         ids=("b1 13x11", "b3 9x10 groups 2"))
def test_pooled_before_the_conv_matches_eager_and_torch(pool, bias, shape):
    x, weight, b, bn = _data(*shape)
    groups = shape[-1]
    kw = POOLS[pool]
    counted = not kw.get("padding") or kw.get("count_include_pad", True)
    takes = ("3x3/1" not in pool and (not bias or kw.get("divisor_override") is None
                                      and (not kw.get("padding") or not counted)))

    def layer(lib, F_, x, weight, b, mean, var, scale, shift):
        h = lib.relu(F_.batch_norm(x, mean, var, scale, shift))
        h = F_.conv2d(h, weight, b if bias else None, groups=groups)
        return F_.avg_pool2d(h, **kw)

    args = (x, weight, b, bn[0], np.abs(bn[1]) + 0.5, bn[2], bn[3])
    want = layer(torch, torch.nn.functional, *map(torch.tensor, args)).numpy()
    eager = layer(dg, F, *map(dg.tensor, args)).numpy()
    compiled = dg.compile(lambda *a: layer(dg, F, *a))
    with dg.no_grad():
        got = compiled(*map(dg.tensor, args)).numpy()
    assert _rewritten(compiled) == takes
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)


def test_a_densenet_transition_of_modules_matches_torch():
    """BN-ReLU-1x1-avgpool as modules in eval mode (constant weights: the conv takes the
    packed kernels after the rule), batch 3, an odd plane."""
    x = np.random.default_rng(1).standard_normal((3, 24, 15, 15)).astype(np.float32)
    ref = torch.nn.Sequential(torch.nn.BatchNorm2d(24), torch.nn.ReLU(),
                              torch.nn.Conv2d(24, 12, 1, bias=False),
                              torch.nn.AvgPool2d(2, 2)).eval()
    with torch.no_grad():
        ref[0].running_mean.uniform_(-1, 1)
        ref[0].running_var.uniform_(0.5, 2)
        ref[0].weight.uniform_(-2, 2)
        want = ref(torch.tensor(x)).numpy()
    nn = dg.nn
    model = nn.Sequential(nn.BatchNorm2d(24), nn.ReLU(), nn.Conv2d(24, 12, 1, bias=False),
                          nn.AvgPool2d(2, 2)).eval()
    model.load_state_dict({k: dg.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    compiled = dg.compile(model)
    with dg.no_grad():
        eager = model(dg.tensor(x)).numpy()
        got = compiled(dg.tensor(x)).numpy()
    assert _rewritten(compiled) == 1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ("conv also returned", "3x3 conv", "strided conv"))
def test_convs_the_rule_leaves_alone(case):
    x, weight, b, _ = _data(1, 8, 10, 10, 6, 1)
    if case == "3x3 conv":
        weight = np.repeat(np.repeat(weight, 3, axis=2), 3, axis=3) / 9

    def layer(lib, F_, x, weight, b):
        y = F_.conv2d(x, weight, b, padding=1 if case == "3x3 conv" else 0,
                      stride=2 if case == "strided conv" else 1)
        z = F_.avg_pool2d(y, 2, 2)
        return (z, y) if case == "conv also returned" else z

    args = (x, weight, b)
    want = layer(torch, torch.nn.functional, *map(torch.tensor, args))
    compiled = dg.compile(lambda *a: layer(dg, F, *a))
    with dg.no_grad():
        got = compiled(*map(dg.tensor, args))
    assert _rewritten(compiled) == 0
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,), strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)


def test_training_gradients_through_the_moved_pool_match_torch():
    """A training step's forward takes the rule too (the conv's gradients read its input,
    not its output): loss and gradients as torch's."""
    x, weight, b, _ = _data(3, 6, 9, 7, 5, 1)
    tw, tb = torch.tensor(weight, requires_grad=True), torch.tensor(b, requires_grad=True)
    torch.nn.functional.avg_pool2d(torch.nn.functional.conv2d(torch.tensor(x), tw, tb), 2,
                                   2, ceil_mode=True).square().sum().backward()
    dw, db = dg.tensor(weight, requires_grad=True), dg.tensor(b, requires_grad=True)

    @dg.compile
    def step(x):
        loss = F.avg_pool2d(F.conv2d(x, dw, db), 2, 2, ceil_mode=True).square().sum()
        loss.backward()
        return loss

    step(dg.tensor(x))
    assert _rewritten(step) == 1
    np.testing.assert_allclose(dw.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(db.grad.numpy(), tb.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_a_symbolic_batch_takes_the_rule():
    """One graph for every batch size (``dynamic=True``): the plane is static, so the pool
    moves; each batch's values as torch's."""
    x, weight, b, _ = _data(5, 8, 10, 12, 6, 1)
    w, bias = dg.tensor(weight), dg.tensor(b)
    compiled = dg.compile(lambda x: F.avg_pool2d(F.conv2d(x, w, bias), 2, 2), dynamic=True)
    with dg.no_grad():
        for n in (1, 3, 5):
            got = compiled(dg.tensor(x[:n])).numpy()
            want = torch.nn.functional.avg_pool2d(torch.nn.functional.conv2d(
                *map(torch.tensor, (x[:n], weight, b))), 2, 2).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (entry,) = compiled.cache.values()
    assert not isinstance(entry.graph.inputs[0].shape[0], int)
    assert _rewritten(compiled) == 1
