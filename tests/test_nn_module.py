"""nn.Module, Parameter, containers and nn.init against torch.nn.

The same nested structure of custom modules (holding Parameters directly) is built with
dualgraph and with torch; names, orders, state-dict keys, reprs and error messages must
match torch's, with ``torch.`` spelled ``dualgraph.``.
"""
from __future__ import annotations

import copy
import math
from collections import OrderedDict

import numpy as np
import pytest
import torch

import dualgraph as dg


def build(lib):
    """A model exercising every registry: own params, buffers (one non-persistent), nested
    modules, every container, a shared submodule, a None parameter and a None child."""
    nn = lib.nn

    class Leaf(nn.Module):
        def __init__(self, n, m):
            super().__init__()
            self.n, self.m = n, m
            self.weight = nn.Parameter(lib.ones(n, m))
            self.bias = nn.Parameter(lib.zeros(n))
            self.register_buffer("running", lib.zeros(n))
            self.register_buffer("scratch", lib.zeros(1), persistent=False)

        def forward(self, x):
            return x * 2

        def extra_repr(self):
            return f"n={self.n}, m={self.m}"

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Leaf(2, 2)
            self.register_buffer("count", lib.zeros(1, dtype=lib.int64))
            self.gate = nn.Parameter(lib.ones(1))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(lib.ones(1))
            self.enc = Leaf(3, 2)
            self.blocks = nn.Sequential(Block(), Leaf(2, 3))
            self.heads = nn.ModuleList([Leaf(1, 2) for _ in range(3)] + [Block()])
            self.table = nn.ModuleDict({"b": Leaf(2, 2), "a": Block()})
            self.plist = nn.ParameterList([lib.ones(2), lib.zeros(3, 4)])
            self.pdict = nn.ParameterDict({"y": lib.ones(1), "x": lib.ones(2, 2)})
            self.shared = self.enc
            self.register_parameter("unused", None)
            self.nothing = None
            self.empty = nn.Sequential()
            self.register_module("tail", Leaf(1, 1))

    return Net()


@pytest.fixture
def nets():
    return build(dg), build(torch)


def names(pairs):
    return [name for name, _ in pairs]


def torch_spelled(text: str) -> str:
    """torch's text as dualgraph spells it (ParameterDict prints legacy type names)."""
    return text.replace("torch.FloatTensor", "torch.float32").replace("torch.", "dualgraph.")


# -- registration and traversal -----------------------------------------------------------
@pytest.mark.parametrize("walk", [
    lambda m: names(m.named_parameters()),
    lambda m: names(m.named_parameters(remove_duplicate=False)),
    lambda m: names(m.named_parameters(prefix="model")),
    lambda m: names(m.named_parameters(recurse=False)),
    lambda m: names(m.named_buffers()),
    lambda m: names(m.named_buffers(remove_duplicate=False)),
    lambda m: names(m.named_modules()),
    lambda m: names(m.named_modules(remove_duplicate=False)),
    lambda m: names(m.named_children()),
    lambda m: list(m.state_dict()),
    lambda m: list(m.state_dict(prefix="p.")),
    lambda m: [tuple(p.shape) for p in m.parameters()],
    lambda m: [type(c).__name__ for c in m.children()],
    lambda m: len(list(m.modules())),
    lambda m: [k for k in dir(m) if not k.startswith("_")
               and k not in dir(torch.nn.Module) and k not in dir(dg.nn.Module)],
], ids=["params", "params_dup", "params_prefix", "params_local", "buffers", "buffers_dup",
        "modules", "modules_dup", "children", "state_dict", "state_dict_prefix", "shapes",
        "child_types", "n_modules", "dir"])
def test_traversal_matches_torch(nets, walk):
    assert walk(nets[0]) == walk(nets[1])


def test_repr_matches_torch(nets):
    ours, theirs = nets
    assert repr(ours) == torch_spelled(repr(theirs))
    assert "(0-2): 3 x Leaf(n=1, m=2)" in repr(ours)


def test_parameter_repr_and_defaults():
    p, tp = dg.nn.Parameter(dg.tensor([1.0, 2.0])), torch.nn.Parameter(torch.tensor([1., 2.]))
    assert repr(p) == repr(tp)
    assert p.requires_grad and p.is_leaf and isinstance(p, dg.Tensor)
    assert not dg.nn.Parameter(dg.ones(1), requires_grad=False).requires_grad
    assert type(p * 2) is dg.Tensor and type(p.detach()) is dg.Tensor
    source = dg.zeros(3)
    shared = dg.nn.Parameter(source)
    with dg.no_grad():
        shared.add_(1.0)
    np.testing.assert_array_equal(source.numpy(), [1, 1, 1])  # Parameter(t) shares storage
    with pytest.raises(RuntimeError, match="floating point"):
        dg.nn.Parameter(dg.tensor([1, 2]))


def test_state_dict_values_are_detached_views(nets):
    net = nets[0]
    sd = net.state_dict()
    assert isinstance(sd, OrderedDict)
    w = sd["enc.weight"]
    assert not w.requires_grad and type(w) is dg.Tensor
    w.numpy()[0, 0] = 7.0
    assert net.enc.weight.detach().numpy()[0, 0] == 7.0  # shares storage, as torch
    assert net.state_dict(keep_vars=True)["enc.weight"] is net.enc.weight
    assert "enc.scratch" not in sd and "unused" not in sd


def test_setattr_moves_between_registries_and_rejects_wrong_types():
    for lib in (dg, torch):
        m = lib.nn.Module()
        m.x = lib.nn.Parameter(lib.ones(1))
        with pytest.raises(TypeError, match="cannot assign .* as parameter 'x'"):
            m.x = lib.ones(1)
        m.x = None
        assert "x" in m._parameters and m.x is None
        m.register_buffer("b", lib.ones(2))
        m.b = lib.zeros(2)
        assert names(m.named_buffers()) == ["b"]
        m.b = lib.nn.Module()  # a buffer name reassigned to a module
        assert "b" not in m._buffers and names(m.named_children()) == ["b"]
        del m.b
        assert names(m.named_children()) == []
        with pytest.raises(AttributeError, match="'Module' object has no attribute 'b'"):
            m.b
        with pytest.raises(KeyError, match="attribute 'training' already exists"):
            m.register_buffer("training", lib.ones(1))
        with pytest.raises(KeyError, match='contain "\\."'):
            m.register_parameter("a.b", None)
        with pytest.raises(TypeError, match="is not a Module subclass"):
            m.add_module("c", 3)


def test_assign_before_init_is_a_clear_error():
    class Bad(dg.nn.Module):
        def __init__(self):
            self.w = dg.nn.Parameter(dg.ones(1))
            super().__init__()
    with pytest.raises(AttributeError, match="before Module.__init__"):
        Bad()


def test_non_leaf_parameter_is_refused():
    m = dg.nn.Module()
    p = dg.nn.Parameter(dg.ones(1))
    q = p * 2
    q.__class__ = dg.nn.Parameter
    with pytest.raises(ValueError, match="Cannot assign non-leaf Tensor to parameter 'q'"):
        m.q = q


def test_get_submodule_parameter_buffer(nets):
    for net in nets:
        assert net.get_submodule("blocks.0.inner") is net.blocks[0].inner
        assert net.get_submodule("") is net
        assert net.get_parameter("heads.3.gate") is net.heads[3].gate
        assert net.get_buffer("table.a.count") is net.table["a"].count
    ours, theirs = nets
    for target in ("enc.nope", "enc.weight.x"):
        with pytest.raises(AttributeError) as e1:
            ours.get_submodule(target)
        with pytest.raises(AttributeError) as e2:
            theirs.get_submodule(target)
        assert str(e1.value) == str(e2.value)


# -- load_state_dict ------------------------------------------------------------------------
def test_load_state_dict_copies_in_place():
    src, dst = build(dg), build(dg)
    for i, p in enumerate(src.parameters()):
        dg.nn.init.constant_(p, float(i))
    params_before = {n: (p, p._data) for n, p in dst.named_parameters()}
    result = dst.load_state_dict(src.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"
    for name, p in dst.named_parameters():
        assert p is params_before[name][0] and p._data is params_before[name][1]
        assert p.requires_grad
        np.testing.assert_array_equal(p.detach().numpy(), src.get_parameter(name).detach().numpy())


def test_load_state_dict_after_save_round_trip(tmp_path):
    save = getattr(dg, "save", dg.io.save)
    load = getattr(dg, "load", dg.io.load)
    src, dst = build(dg), build(dg)
    for p in src.parameters():
        dg.nn.init.normal_(p)
    save(src.state_dict(), tmp_path / "m.safetensors")
    dst.load_state_dict(load(tmp_path / "m.safetensors"))
    for (n, a), (_, b) in zip(src.state_dict().items(), dst.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=n)


def edit_state(sd, lib):
    """Drop two keys, add two and change one shape: the same edits in either library."""
    sd = OrderedDict(sd)
    del sd["enc.bias"], sd["table.a.count"]
    sd["enc.extra"] = lib.zeros(1)
    sd["ghost.weight"] = lib.zeros(1)
    sd["heads.0.weight"] = lib.zeros(5, 2)
    return sd


def test_load_state_dict_strict_errors_match_torch(nets):
    ours, theirs = nets
    with pytest.raises(RuntimeError) as e1:
        ours.load_state_dict(edit_state(ours.state_dict(), dg))
    with pytest.raises(RuntimeError) as e2:
        theirs.load_state_dict(edit_state(theirs.state_dict(), torch))
    message = str(e1.value)
    assert message == torch_spelled(str(e2.value))
    assert message.startswith("Error(s) in loading state_dict for Net:\n\t"
                              'Missing key(s) in state_dict: "enc.bias", "table.a.count". ')
    # torch's order: keys the root doesn't claim first, then each submodule's
    assert 'Unexpected key(s) in state_dict: "ghost.weight", "enc.extra".' in message
    assert ("size mismatch for heads.0.weight: copying a param with shape "
            "dualgraph.Size([5, 2]) from checkpoint, the shape in current model is "
            "dualgraph.Size([1, 2]).") in message


def test_load_state_dict_non_strict_reports_keys(nets):
    results = []
    for net, lib in zip(nets, (dg, torch)):
        sd = edit_state(net.state_dict(), lib)
        sd["heads.0.weight"] = lib.full((1, 2), 3.0)
        results.append(net.load_state_dict(sd, strict=False))
    assert results[0] == tuple(results[1])
    assert results[0].missing_keys == ["enc.bias", "table.a.count"]
    np.testing.assert_array_equal(nets[0].heads[0].weight.detach().numpy(), [[3, 3]])
    with pytest.raises(RuntimeError, match="size mismatch for enc.weight"):
        nets[0].load_state_dict({"enc.weight": dg.zeros(1)}, strict=False)
    with pytest.raises(TypeError, match="Expected state_dict to be dict-like"):
        nets[0].load_state_dict([1, 2])
    with pytest.raises(RuntimeError, match='While copying the parameter named "scale"'):
        nets[0].load_state_dict({"scale": [1.0]}, strict=False)


def test_load_state_dict_assign_takes_the_tensors():
    net = build(dg)
    sd = {k: v.clone() for k, v in net.state_dict().items()}
    net.load_state_dict(sd, assign=True)
    assert isinstance(net.table.b.weight, dg.nn.Parameter) and net.table.b.weight.requires_grad
    assert net.table.b.weight._data is sd["table.b.weight"]._data
    assert net.table.b.running is sd["table.b.running"]


def test_load_casts_to_the_parameter_dtype():
    m = dg.nn.Module()
    m.w = dg.nn.Parameter(dg.zeros(2))
    m.load_state_dict({"w": dg.tensor([1.5, 2.5], dtype=dg.float64)})
    assert m.w.dtype == dg.float32
    np.testing.assert_array_equal(m.w.detach().numpy(), [1.5, 2.5])


# -- modes, bulk updates, calling -----------------------------------------------------------
def test_train_eval_propagate(nets):
    for net in nets:
        assert net.eval() is net
        assert all(not m.training for m in net.modules())
        net.blocks.train()
        assert net.blocks[0].inner.training and not net.enc.training
        net.train()
        assert all(m.training for m in net.modules())
        with pytest.raises(ValueError, match="training mode is expected to be boolean"):
            net.train("yes")


def test_apply_visits_children_first_like_torch(nets):
    orders = []
    for net in nets:
        seen = []
        net.apply(lambda m: seen.append(type(m).__name__))
        orders.append(seen)
    assert orders[0] == orders[1]


def test_to_casts_floating_state_in_place_keeping_parameter_objects():
    net = build(dg)
    params = list(net.parameters())
    net.enc.weight.grad = dg.ones(3, 2)
    assert net.double() is net
    assert [p for p in net.parameters()] == params
    assert all(p.dtype == dg.float64 and type(p) is dg.nn.Parameter for p in params)
    assert net.enc.weight.grad.dtype == dg.float64
    assert net.enc.running.dtype == dg.float64 and net.enc.scratch.dtype == dg.float64
    assert net.blocks[0].count.dtype == dg.int64  # integer buffers keep their type
    net.half()
    assert net.scale.dtype == dg.float16
    net.to(dtype=dg.bfloat16).to("cpu")
    assert net.scale.dtype == dg.bfloat16
    net.float()
    assert net.scale.dtype == dg.float32
    with pytest.raises(TypeError, match="only accepts floating point"):
        net.to(dg.int32)
    with pytest.raises(ValueError, match="not available"):
        net.to("cuda")


def test_zero_grad_and_requires_grad_():
    net = build(dg)
    (net.scale * 3).sum().backward()
    np.testing.assert_array_equal(net.scale.grad.numpy(), [3.0])
    grad = net.scale.grad
    net.zero_grad(set_to_none=False)
    assert net.scale.grad is grad and grad.numpy().tolist() == [0.0]
    net.zero_grad()
    assert net.scale.grad is None
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_forward_pre_hooks_and_hooks_with_handles():
    leaf = build(dg).enc
    calls = []

    def pre(module, args):
        calls.append("pre")
        return args[0] + 1  # a non-tuple result replaces the single argument

    def post(module, args, output):
        calls.append("post")
        return output * 10

    def pre_kw(module, args, kwargs):
        calls.append("pre_kw")

    h_pre = leaf.register_forward_pre_hook(pre)
    h_post = leaf.register_forward_hook(post)
    leaf.register_forward_pre_hook(pre_kw, with_kwargs=True, prepend=True)
    out = leaf(dg.tensor([1.0]))
    assert out.tolist() == [40.0] and calls == ["pre_kw", "pre", "post"]
    h_pre.remove()
    with h_post:
        pass  # leaving the with-block removes the hook
    calls.clear()
    assert leaf(dg.tensor([1.0])).tolist() == [2.0] and calls == ["pre_kw"]


def test_forward_hook_with_kwargs_sees_kwargs():
    class Add(dg.nn.Module):
        def forward(self, x, y=0.0):
            return x + y

    m = Add()
    seen = {}
    m.register_forward_hook(lambda mod, args, kwargs, out: seen.update(kwargs), with_kwargs=True)
    m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {"y": 5.0}), with_kwargs=True)
    assert m(dg.tensor([1.0]), y=1.0).tolist() == [6.0]
    assert seen == {"y": 5.0}


def test_missing_forward_error():
    with pytest.raises(NotImplementedError, match='Module \\[Module\\] is missing the required '
                                                  '"forward" function'):
        dg.nn.Module()(1)


def test_deepcopy_gives_independent_parameters():
    net = build(dg)
    twin = copy.deepcopy(net)
    assert type(twin.enc.weight) is dg.nn.Parameter and twin.enc.weight is not net.enc.weight
    assert twin.shared is twin.enc  # sharing survives the copy
    dg.nn.init.zeros_(twin.enc.weight)
    assert net.enc.weight.detach().numpy().sum() == 6.0


# -- containers -------------------------------------------------------------------------------
def leaf(lib, n):
    m = lib.nn.Module()
    m.w = lib.nn.Parameter(lib.zeros(n))
    return m


def param_shapes(module):
    return [(n, tuple(p.shape)) for n, p in module.named_parameters()]


EDITS = {
    "append": lambda lib, s: s.append(leaf(lib, 9)),
    "insert": lambda lib, s: s.insert(1, leaf(lib, 9)),
    "insert_neg": lambda lib, s: s.insert(-1, leaf(lib, 9)),
    "extend": lambda lib, s: s.extend([leaf(lib, 8), leaf(lib, 9)]),
    "del": lambda lib, s: s.__delitem__(1),
    "del_slice": lambda lib, s: s.__delitem__(slice(0, 2)),
    "pop": lambda lib, s: s.pop(-1),
    "setitem": lambda lib, s: s.__setitem__(-2, leaf(lib, 7)),
}
# torch's ModuleList.insert fails on negative indices (ours counts from the end, as
# Sequential.insert does; test_module_list_ops checks it).
SEQUENCE_CASES = [(kind, name) for kind in ("Sequential", "ModuleList") for name in EDITS
                  if (kind, name) != ("ModuleList", "insert_neg")]


@pytest.mark.parametrize("kind,edit", SEQUENCE_CASES)
def test_sequence_edits_match_torch(kind, edit):
    results = []
    for lib in (dg, torch):
        mods = [leaf(lib, n) for n in (1, 2, 3)]
        seq = getattr(lib.nn, kind)(*mods) if kind == "Sequential" else lib.nn.ModuleList(mods)
        EDITS[edit](lib, seq)
        results.append(param_shapes(seq))
    assert results[0] == results[1]


def test_sequential_indexing_slicing_and_forward():
    class AddOne(dg.nn.Module):
        def forward(self, x):
            return x + 1

    class Double(dg.nn.Module):
        def forward(self, x):
            return x * 2

    seq = dg.nn.Sequential(AddOne(), Double(), AddOne())
    assert seq(dg.tensor([1.0])).tolist() == [5.0]
    assert isinstance(seq[1:], dg.nn.Sequential) and len(seq[1:]) == 2
    assert seq[1:](dg.tensor([1.0])).tolist() == [3.0]
    assert seq[-1] is seq[2] and list(seq) == [seq[0], seq[1], seq[2]]
    with pytest.raises(IndexError, match="index 3 is out of range"):
        seq[3]
    named = dg.nn.Sequential(OrderedDict([("first", AddOne()), ("second", Double())]))
    assert names(named.named_children()) == ["first", "second"]
    assert named[0] is named.first and list(named[1:]._modules) == ["second"]
    both = seq + named
    assert len(both) == 5 and both(dg.tensor([0.0])).tolist() == [8.0]
    seq += named
    assert len(seq) == 5


def test_module_list_ops():
    ml = dg.nn.ModuleList([leaf(dg, 1)])
    ml += [leaf(dg, 2)]
    ml.append(leaf(dg, 3))
    assert [p.shape[0] for p in ml.parameters()] == [1, 2, 3]
    assert isinstance(ml[:2], dg.nn.ModuleList) and len(ml[:2]) == 2
    assert len(ml + dg.nn.ModuleList([leaf(dg, 4)])) == 4
    ml.insert(-1, leaf(dg, 5))
    assert [p.shape[0] for p in ml.parameters()] == [1, 2, 5, 3]
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable"):
        ml.extend(5)
    with pytest.raises(NotImplementedError):
        ml(1)


def test_module_dict_and_parameter_containers_match_torch():
    results = []
    for lib in (dg, torch):
        md = lib.nn.ModuleDict({"z": leaf(lib, 1)})
        md["a"] = leaf(lib, 2)
        md.update([("m", leaf(lib, 3))])
        md.update(OrderedDict(q=leaf(lib, 4)))
        popped = md.pop("z")
        pl = lib.nn.ParameterList([lib.ones(2)])
        pl.append(lib.nn.Parameter(lib.ones(3)))
        pl += [lib.zeros(1)]
        pl[0] = lib.zeros(5)
        pd = lib.nn.ParameterDict({"b": lib.ones(1)})
        pd["a"] = lib.ones(2)
        pd.update({"c": lib.nn.Parameter(lib.ones(3))})
        holder = lib.nn.Module()
        holder.md, holder.pl, holder.pd = md, pl, pd
        results.append((param_shapes(holder), list(md.keys()), "z" in md, "a" in md,
                        isinstance(popped, lib.nn.Module), len(pl), len(pd), list(pd),
                        all(isinstance(p, lib.nn.Parameter) for p in pl),
                        [tuple(p.shape) for p in pl[1:]],
                        torch_spelled(repr(holder))))
    assert results[0] == results[1]


def test_parameter_containers_are_not_callable():
    for container in (dg.nn.ParameterList(), dg.nn.ParameterDict()):
        with pytest.raises(RuntimeError, match="should not be called"):
            container()


# -- nn.init ----------------------------------------------------------------------------------
init = dg.nn.init


def sample(fn, shape=(400, 300), **kwargs):
    t = dg.empty(*shape, dtype=dg.float64)
    out = fn(t, **kwargs)
    assert out is t
    return t.numpy()


def test_calculate_gain_and_fans_match_torch():
    for name, param in [("linear", None), ("conv2d", None), ("sigmoid", None), ("tanh", None),
                        ("relu", None), ("leaky_relu", None), ("leaky_relu", 0.2),
                        ("selu", None)]:
        assert init.calculate_gain(name, param) == pytest.approx(
            torch.nn.init.calculate_gain(name, param))
    with pytest.raises(ValueError, match="Unsupported nonlinearity gelu"):
        init.calculate_gain("gelu")
    for shape in [(3, 4), (8, 3, 5, 5), (2, 6, 7)]:
        assert init._calculate_fan_in_and_fan_out(dg.empty(*shape)) == \
            torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(*shape))
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(dg.empty(3))


def test_uniform_and_normal_distributions():
    u = sample(init.uniform_, a=-2.0, b=3.0)
    assert u.min() >= -2.0 and u.max() < 3.0
    assert u.mean() == pytest.approx(0.5, abs=0.02)
    assert u.std() == pytest.approx(5 / math.sqrt(12), rel=0.01)
    n = sample(init.normal_, mean=1.0, std=2.0)
    assert n.mean() == pytest.approx(1.0, abs=0.02) and n.std() == pytest.approx(2.0, rel=0.01)


def test_trunc_normal_matches_torch_statistics():
    kwargs = dict(mean=0.5, std=1.0, a=-1.0, b=1.5)
    ours = sample(init.trunc_normal_, **kwargs)
    theirs = torch.nn.init.trunc_normal_(torch.empty(400, 300, dtype=torch.float64),
                                         **kwargs).numpy()
    assert ours.min() >= -1.0 and ours.max() <= 1.5
    assert ours.mean() == pytest.approx(theirs.mean(), abs=0.01)
    assert ours.std() == pytest.approx(theirs.std(), rel=0.01)
    with pytest.raises(ValueError, match="choose bounds nearer the mean"):
        init.trunc_normal_(dg.empty(3), a=10.0, b=11.0)


@pytest.mark.parametrize("shape", [(200, 300), (64, 32, 3, 3)])
def test_xavier_and_kaiming_scale_like_torch(shape):
    t = torch.empty(*shape)
    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(t)
    cases = [
        (init.xavier_uniform_, dict(gain=2.0), 2.0 * math.sqrt(2.0 / (fan_in + fan_out))),
        (init.xavier_normal_, dict(gain=0.5), 0.5 * math.sqrt(2.0 / (fan_in + fan_out))),
        (init.kaiming_uniform_, dict(a=math.sqrt(5)), math.sqrt(2 / 6) / math.sqrt(fan_in)),
        (init.kaiming_normal_, dict(mode="fan_out", nonlinearity="relu"),
         math.sqrt(2) / math.sqrt(fan_out)),
    ]
    for fn, kwargs, std in cases:
        values = sample(fn, shape, **kwargs)
        theirs = getattr(torch.nn.init, fn.__name__)(torch.empty(*shape, dtype=torch.float64),
                                                     **kwargs).numpy()
        assert values.std() == pytest.approx(std, rel=0.03), fn.__name__
        assert values.std() == pytest.approx(theirs.std(), rel=0.03), fn.__name__
        if "uniform" in fn.__name__:
            assert np.abs(values).max() <= math.sqrt(3) * std
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_uniform_(dg.empty(2, 2), mode="fan_avg")


@pytest.mark.parametrize("shape", [(5, 8), (8, 5), (4, 2, 3)])
def test_orthogonal(shape):
    w = sample(init.orthogonal_, shape, gain=2.0).reshape(shape[0], -1)
    rows, cols = w.shape
    gram = w @ w.T if rows <= cols else w.T @ w
    np.testing.assert_allclose(gram, 4.0 * np.eye(min(rows, cols)), atol=1e-10)
    with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions"):
        init.orthogonal_(dg.empty(3))


def test_constant_ones_zeros_eye_and_dtypes():
    assert sample(init.constant_, (2, 3), val=0.25).tolist() == [[0.25] * 3] * 2
    assert sample(init.ones_, (2,)).tolist() == [1, 1]
    assert sample(init.zeros_, (2,)).tolist() == [0, 0]
    assert sample(init.eye_, (2, 3)).tolist() == [[1, 0, 0], [0, 1, 0]]
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions"):
        init.eye_(dg.empty(2, 2, 2))
    for dtype in (dg.bfloat16, dg.float16, dg.float32):
        t = init.normal_(dg.empty(50, dtype=dtype))
        assert t.dtype == dtype and np.isfinite(t.float().numpy()).all()


def test_init_is_in_place_on_parameters_and_seeded_by_generator():
    p = dg.nn.Parameter(dg.zeros(4, 4))
    storage = p._data
    init.kaiming_uniform_(p, generator=dg.Generator(3))
    assert p._data is storage and p.requires_grad and p.grad_fn is None
    again = init.kaiming_uniform_(dg.empty(4, 4), generator=dg.Generator(3))
    np.testing.assert_array_equal(p.detach().numpy(), again.numpy())
    dg.manual_seed(7)
    a = init.normal_(dg.empty(5)).numpy().copy()
    dg.manual_seed(7)
    np.testing.assert_array_equal(init.normal_(dg.empty(5)).numpy(), a)


def test_kaiming_on_empty_tensor_warns_and_returns():
    t = dg.empty(0, 3)
    with pytest.warns(UserWarning, match="zero-element tensors is a no-op"):
        assert init.kaiming_normal_(t) is t
