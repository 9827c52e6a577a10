"""Differential test of the inference rules on generated CNNs at real widths.

``test_generated_models.py`` draws models of 3-8 channels on 8x8 images, which never reach
the loops built for real networks: the packed 3x3 loop (pairs, two and three pairs an item,
stride-2 phases, grouped convs padded to whole pairs), the 1x1 loop with its BatchNorm-ReLU
prologue, the stem loop, winograd, the channels-last and channel-blocked regions,
squeeze-excitation, residual epilogues, concatenation in place, BatchNorm and input-affine
folding, patchify convs and pooling on lanes. This grammar draws inference CNNs at the
widths and planes those loops are chosen for: channels 1-160 (16k +- 1 among them), planes
1x1-40x40 odd and even, batch 1-3, kernels 1/2/3/4/5/7, strides 1/2/4, padding (asymmetric
through ``F.pad``), dilation, groups (depthwise, group widths 8-64), BatchNorm before or
after convs and their activations, six activations, residual blocks, squeeze-excitation,
dense concatenation chains, multi-branch concatenation, max/avg pools with ``ceil_mode``
and padding, adaptive pools and flatten + linear heads (or the feature map itself).

Each model is built twice from one description, with dualgraph and with torch, and given
one random state (BatchNorm statistics not the initial ones). In eval mode under
``no_grad``: ``dg.compile`` must match eager (float32, ``capture/check.py``'s tolerance,
which grows with the value's largest element), eager must match torch, and torch's ONNX
export (``dynamo=False``) loaded by ``dg.onnx.load`` must match torch. A failing model
prints its description.

CI runs ``DG_CNN_EXAMPLES`` seeds from ``DG_CNN_FIRST`` (default 8 from 0). A campaign::

    PYTHONPATH=$PWD python -m tests.test_generated_cnns --seeds 0:300

prints each failing seed with its traceback, then how often each lowering rule fired and
each kernel was called in the compiled code (and the packed 3x3 loop's work-item kinds),
so a campaign shows which paths it reached; ``--seed 17`` prints one model's description.
"""
from __future__ import annotations

import collections
import contextlib
import os
import random
import re
import sys
import warnings

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.capture.check import _close

try:   # (pytest puts tests/ on the path; python -m tests.<module> does not)
    from fuzzing import campaign, campaign_parser, chosen_seeds
except ImportError:
    from tests.fuzzing import campaign, campaign_parser, chosen_seeds

EXAMPLES = int(os.environ.get("DG_CNN_EXAMPLES", "8"))
FIRST = int(os.environ.get("DG_CNN_FIRST", "0"))
WIDTHS = [1, 2, 3, 4, 6, 8, 12, 15, 16, 17, 24, 31, 32, 33, 40, 47, 48, 49, 56, 63, 64, 65,
          72, 80, 96, 112, 127, 128, 129, 144, 160]
ACTS = ["ReLU", "ReLU6", "SiLU", "Hardswish", "GELU", "Sigmoid"]
# The most elements one image's layer may make (channels x plane): CPU time of the three
# runs of each model (eager dualgraph's convs are NumPy's)
BUDGET = 96 * 24 * 24
MAX_CHANNELS = 256   # (concatenations grow past the widest conv's 160)
CLASSES = 5
HITS: collections.Counter = collections.Counter()   # what a campaign's models reached


# -- the description: a list of layers, each a tuple; ``build`` makes it a module ------------

class Shape:
    """The channels and plane of the value the next layer reads."""

    def __init__(self, c, h, w):
        self.c, self.h, self.w = c, h, w
        self.dropped = False   # whether a ceil_mode pool dropped a last window (below)

    def out(self, k, stride, pad, dilation=1, ceil=False, drop=True):
        """The plane after a window of ``k`` (pads ``(before, after)`` per axis)."""
        sizes = []
        for n, (p0, p1) in zip((self.h, self.w), pad):
            span = n + p0 + p1 - dilation * (k - 1) - 1
            size = (-(-span // stride) if ceil else span // stride) + 1
            if drop and ceil and (size - 1) * stride >= n + p0:
                size -= 1   # (torch's rule: a last window starting in the right padding
                #              is dropped)
            sizes.append(size)
        return sizes

    def fits(self, c, h, w):
        return min(h, w) >= 1 and c <= MAX_CHANNELS and c * h * w <= BUDGET


def width(r, near=None):
    if near is not None and r.random() < 0.5:
        return near
    return r.choice(WIDTHS)


def conv_layer(r, s: Shape, cout=None, k=None, stride=None, groups=None, act=True,
               same=False, padding=None):
    """A conv (with its BatchNorm and activation in one of the orders nets use), or None
    where the drawn geometry leaves no output or too large a one. ``same``: an odd kernel,
    stride 1, padded to keep the plane."""
    k = k or r.choice([1, 1, 2, 3, 3, 3, 4, 5, 7])
    stride = 1 if same else stride or r.choice([1, 1, 1, 2, 2, 4] if k > 1 else [1, 1, 2])
    dilation = r.choice([1, 1, 1, 1, 2, 3]) if k in (2, 3) and stride == 1 else 1
    cout = cout or width(r, s.c)
    if groups is None:
        groups = 1
        roll = r.random()
        if roll < 0.2 and k > 1:
            groups, cout = s.c, s.c * r.choice([1, 1, 1, 2])            # depthwise
        elif roll < 0.35:
            per = r.choice([8, 16, 24, 32, 64])                           # group width
            if s.c % per == 0 and s.c > per:
                groups = s.c // per
                cout = groups * max(1, cout // groups)
    asym = not same and padding is None and r.random() < 0.15
    if asym:
        pad = tuple((r.randint(0, k - 1), r.randint(0, k - 1)) for _ in "hw")
        padding = 0
    else:
        if padding is None:
            padding = (dilation * (k // 2) if same
                       else r.choice([dilation * (k // 2)] * 2 + [0]))
        pad = ((padding, padding), (padding, padding))
    h, w = s.out(k, stride, pad, dilation)
    if not s.fits(cout, h, w):
        return None
    bn = r.choice(["after", "after", "after", "act_after", "before", "input", "none"])
    name = r.choice(ACTS) if act and r.random() < 0.85 else None
    layers = []
    if asym:
        layers.append(("pad", (pad[1][0], pad[1][1], pad[0][0], pad[0][1])))
    if bn in ("before", "input"):   # (a BatchNorm of the conv's input: with a ReLU or not)
        layers.append(("bn", s.c))
    if bn == "before":
        layers.append(("act", name or "ReLU"))
    layers.append(("conv", s.c, cout, k, stride, padding, dilation, groups,
                   r.random() < 0.5 or bn == "none"))
    if bn == "after":
        layers.append(("bn", cout))
    if name and bn != "before":
        layers.append(("act", name))
    if bn == "act_after":
        layers.append(("bn", cout))
    s.c, s.h, s.w = cout, h, w
    return layers


def block(r, s: Shape):
    """One block of layers, appended in ``s``'s place (or None: try another)."""
    kind = r.choice(["conv", "conv", "conv", "residual", "bottleneck", "separable", "excite",
                     "inverted", "inverted", "dense", "branches", "pool", "pool"])
    if kind == "conv":
        return conv_layer(r, s)
    if kind == "inverted":   # a stage of MobileNet's blocks: 1x1 up, depthwise, (SE), 1x1
        layers = []
        for i in range(r.randint(1, 3)):
            inner, k = Shape(s.c, s.h, s.w), r.choice([3, 5])
            mid, cout = s.c * r.choice([1, 2, 4, 6]), s.c if i else width(r, s.c)
            body = [conv_layer(r, inner, cout=mid, k=1, groups=1, same=True),
                    conv_layer(r, inner, cout=mid, k=k, stride=1 if i else r.choice([1, 2]),
                               groups=mid, padding=k // 2)]
            if r.random() < 0.5:
                body.append([("excite", mid, max(1, mid // 4), "ReLU", "Hardsigmoid")])
            body.append(conv_layer(r, inner, cout=cout, k=1, groups=1, act=False, same=True))
            if None in body:
                break
            body = [x for b in body for x in b]
            same_shape = (inner.c, inner.h, inner.w) == (s.c, s.h, s.w)
            layers += [("residual", body, None)] if same_shape else body
            s.c, s.h, s.w = inner.c, inner.h, inner.w
        return layers
    if kind in ("residual", "bottleneck", "separable"):
        inner = Shape(s.c, s.h, s.w)
        if kind == "residual":
            body = [conv_layer(r, inner, cout=s.c, k=3, groups=1, same=True),
                    conv_layer(r, inner, cout=s.c, k=3, groups=1, act=False, same=True)]
        elif kind == "bottleneck":
            mid = width(r)
            body = [conv_layer(r, inner, cout=mid, k=1, groups=1, same=True),
                    conv_layer(r, inner, cout=mid, k=3, same=True),
                    conv_layer(r, inner, cout=s.c, k=1, groups=1, act=False, same=True)]
        else:
            body = [conv_layer(r, inner, cout=s.c, k=r.choice([3, 5]), groups=s.c, same=True),
                    conv_layer(r, inner, cout=s.c, k=1, groups=1, act=False, same=True)]
        if any(b is None for b in body) or (inner.c, inner.h, inner.w) != (s.c, s.h, s.w):
            return None
        after = r.choice(ACTS + [None]) if r.random() < 0.7 else None
        return [("residual", [x for b in body for x in b], after)]
    if kind == "excite":
        squeeze = max(1, s.c // r.choice([4, 8, 16]))
        return [("excite", s.c, squeeze, r.choice(["ReLU", "SiLU"]),
                 r.choice(["Sigmoid", "Hardsigmoid"]))]
    if kind == "dense":   # DenseNet's: BatchNorm, ReLU, (a 1x1 to 4x the growth, ...) a conv
        growth, units, c = r.choice([8, 12, 16, 24, 32]), [], s.c
        for _ in range(r.randint(1, 4)):
            if not s.fits(c + growth, s.h, s.w):
                break
            k, unit, cin = r.choice([1, 3]), [], c
            if r.random() < 0.5:
                unit = [("bn", c), ("act", "ReLU"), ("conv", c, 4 * growth, 1, 1, 0, 1, 1, False)]
                cin = 4 * growth
            unit += [("bn", cin), ("act", "ReLU"), ("conv", cin, growth, k, 1, k // 2, 1, 1,
                                                    False)]
            units.append(unit)
            c += growth
        if not units:
            return None
        s.c = c
        return [("dense", units)]
    if kind == "branches":   # Inception's: 1x1; 1x1 then 3x3 or 5x5; a max pool then 1x1
        branches, c = [], 0
        for _ in range(r.randint(2, 4)):
            inner = Shape(s.c, s.h, s.w)
            shape = r.choice(["1x1", "1x1-3x3", "1x1-5x5", "pool-1x1"])
            branch = [("maxpool", 3, 1, 1, False)] if shape == "pool-1x1" else []
            if shape[-1] in "35":
                branch += conv_layer(r, inner, k=1, groups=1, same=True) or [None]
            branch += conv_layer(r, inner, k=int(shape[-1]), groups=1, same=True) or [None]
            if None in branch:
                return None
            branches.append(branch)
            c += inner.c
        if not s.fits(c, s.h, s.w):
            return None
        s.c = c
        return [("branches", branches)]
    # pooling
    k = r.choice([2, 2, 3, 3, 5])
    stride = r.choice([1, 2, 2, k])
    pad = r.randint(0, k // 2)
    ceil = r.random() < 0.4
    h, w = s.out(k, stride, ((pad, pad), (pad, pad)), ceil=ceil)
    if min(h, w) < 1:
        return None
    s.dropped |= [h, w] != s.out(k, stride, ((pad, pad), (pad, pad)), ceil=ceil, drop=False)
    s.h, s.w = h, w
    if r.random() < 0.5:
        return [("maxpool", k, stride, pad, ceil)]
    return [("avgpool", k, stride, pad, ceil, r.random() < 0.5)]


def describe(seed: int):
    """The drawn model: (layers, input shape (N, C, H, W), the cores dualgraph's loops use
    (one is where Winograd runs, more split the loops' work items otherwise), the options
    of ``dg.compile``'s passes (the opt-in ``channels_last`` regions, with and without
    squeeze-excitation made one op), and whether
    torch's ONNX export of it is sound: its shape inference keeps the last window a
    ``ceil_mode`` pool drops (it starts in the padding), so the model declares the wrong
    plane for the outputs (``dg.onnx.load`` refuses a declared shape the graph does not
    compute; onnxruntime warns) and ``AdaptiveMaxPool2d`` after such a pool is exported as
    a ``MaxPool`` whose kernel is that wrong plane's, larger than the real one."""
    r = random.Random(seed)
    cores = r.choice([1, 2, 4])
    passes = r.choice([None, None, {"channels_last": True},
                       {"channels_last": True, "squeeze_excite": False}])
    batch = r.randint(1, 3)
    cin = r.choice([1, 3, 3, 4, 8, 16, 32, 64]) if r.random() < 0.6 else r.choice(WIDTHS)
    nhwc = r.random() < 0.25   # an input in channels-last, permuted to NCHW first
    side = r.randint(1, 40)
    h, w = (side, side) if r.random() < 0.7 else (side, r.randint(1, 40))
    while cin * h * w > BUDGET:
        h, w = max(1, h // 2), max(1, w // 2)
    s, layers = Shape(cin, h, w), [("nchw",)] if nhwc else []
    if r.random() < 0.2:
        layers.append(("normalize", cin))
    if r.random() < 0.5 and cin <= 4:   # a stem: a wide conv, a patchify conv
        k = r.choice([3, 7, 2, 4, 8, 16])
        patch = k in (2, 4, 8, 16)
        layers += conv_layer(r, s, cout=width(r), k=k, stride=k if patch else 2, groups=1,
                             padding=0 if patch else None) or []
    for _ in range(r.randint(1, 6)):
        layers += block(r, s) or []
    head = r.choice(["avg", "avg", "max", "flatten", "none"])
    if head == "flatten" and s.c * s.h * s.w > 4096:
        head = "avg"
    if head != "none":
        layers.append(("head", head, s.c, s.c * s.h * s.w))
    shape = (batch, h, w, cin) if nhwc else (batch, cin, h, w)
    return layers, shape, cores, passes, not s.dropped


# -- building the description with a library (torch or dualgraph) ----------------------------

def build(layers, lib):
    """The description as ``lib``'s modules (``lib``: ``torch`` or ``dualgraph``)."""
    nn, F = lib.nn, lib.nn.functional

    class Pad(nn.Module):
        def __init__(self, pads):
            super().__init__()
            self.pads = pads

        def forward(self, x):
            return F.pad(x, self.pads)

    class Permute(nn.Module):
        def forward(self, x):
            return x.permute(0, 3, 1, 2)

    class Normalize(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.register_buffer("mean", lib.zeros(1, c, 1, 1))
            self.register_buffer("std", lib.ones(1, c, 1, 1))

        def forward(self, x):
            return (x - self.mean) / self.std

    class Residual(nn.Module):
        def __init__(self, body, act):
            super().__init__()
            self.body, self.act = body, getattr(nn, act)() if act else nn.Identity()

        def forward(self, x):
            return self.act(self.body(x) + x)

    class Excite(nn.Module):
        def __init__(self, c, squeeze, act, gate):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)
            self.act, self.gate = getattr(nn, act)(), getattr(nn, gate)()

        def forward(self, x):
            s = F.adaptive_avg_pool2d(x, 1)
            return x * self.gate(self.fc2(self.act(self.fc1(s))))

    class Dense(nn.Module):
        def __init__(self, units):
            super().__init__()
            self.units = nn.ModuleList(units)

        def forward(self, x):
            for unit in self.units:
                x = lib.cat([x, unit(x)], 1)
            return x

    class Branches(nn.Module):
        def __init__(self, branches):
            super().__init__()
            self.branches = nn.ModuleList(branches)

        def forward(self, x):
            return lib.cat([b(x) for b in self.branches], 1)

    class Head(nn.Module):
        def __init__(self, kind, c, flat):
            super().__init__()
            self.pool = {"avg": nn.AdaptiveAvgPool2d(1), "max": nn.AdaptiveMaxPool2d(1),
                         "flatten": nn.Identity()}[kind]
            self.fc = nn.Linear(flat if kind == "flatten" else c, CLASSES)

        def forward(self, x):
            return self.fc(lib.flatten(self.pool(x), 1))

    def make(layer):
        kind, *a = layer
        if kind == "nchw":
            return Permute()
        if kind == "conv":
            cin, cout, k, stride, padding, dilation, groups, bias = a
            return nn.Conv2d(cin, cout, k, stride, padding, dilation, groups, bias)
        if kind == "bn":
            return nn.BatchNorm2d(a[0])
        if kind == "act":
            return getattr(nn, a[0])()
        if kind == "pad":
            return Pad(a[0])
        if kind == "normalize":
            return Normalize(a[0])
        if kind == "residual":
            return Residual(sequence(a[0]), a[1])
        if kind == "excite":
            return Excite(*a)
        if kind == "dense":
            return Dense([sequence(u) for u in a[0]])
        if kind == "branches":
            return Branches([sequence(b) for b in a[0]])
        if kind == "maxpool":
            k, stride, pad, ceil = a
            return nn.MaxPool2d(k, stride, pad, ceil_mode=ceil)
        if kind == "avgpool":
            k, stride, pad, ceil, include = a
            return nn.AvgPool2d(k, stride, pad, ceil_mode=ceil, count_include_pad=include)
        return Head(*a)

    def sequence(items):
        return nn.Sequential(*[make(x) for x in items]) if items else nn.Identity()

    return sequence(layers)


def state(reference, seed):
    """A random state for ``reference``'s parameters and buffers (float32 arrays): weights
    of He's scale, so values keep their size through the layers; BatchNorm statistics and
    affine parameters away from the initial ones, the input's mean and spread too."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, value in reference.state_dict().items():
        shape = tuple(value.shape)
        if value.dtype != torch.float32:
            continue
        if key.endswith(("running_var", "std")):
            v = rng.uniform(0.5, 2.0, shape)
        elif key.endswith("weight") and len(shape) == 1:   # BatchNorm's scale
            v = rng.uniform(0.5, 1.5, shape)
        elif len(shape) >= 2:
            v = rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))
        else:
            v = rng.standard_normal(shape) * 0.2
        out[key] = v.astype(np.float32)
    return out


def text(layers, shape, cores, passes) -> str:
    return (f"input {shape}, {cores} core(s), passes {passes}\n"
            + "\n".join(map(repr, layers)))


@contextlib.contextmanager
def using_cores(cores: int):
    """Run the body with dualgraph's loops on ``cores`` cores (``DUALGRAPH_NUM_THREADS``:
    read at each compile and call)."""
    before = os.environ.get("DUALGRAPH_NUM_THREADS")
    os.environ["DUALGRAPH_NUM_THREADS"] = str(cores)
    try:
        yield
    finally:
        if before is None:
            del os.environ["DUALGRAPH_NUM_THREADS"]
        else:
            os.environ["DUALGRAPH_NUM_THREADS"] = before


# -- the check ----------------------------------------------------------------------------

def assert_close(got, want, what, description):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}\n{description}"
    if not _close(got, want):
        diff = np.abs(got.astype(np.float64) - want)
        raise AssertionError(f"{what}: max abs difference {np.nanmax(diff):.3g} (largest "
                             f"value {np.nanmax(np.abs(want)):.3g})\n{description}")


def reached(compiled) -> list[str]:
    """The lowering rules that fired on the compiled graph and the kernels its code calls."""
    report = compiled.explain()
    rules = re.findall(r"^ {4}(\w+): ", report, re.M)
    calls = re.findall(r"= (\w+)\(", compiled.code)
    return [f"rule {r}" for r in rules] + [
        "kernel " + re.sub(r"(_\d+)+$", "", c) for c in calls]   # (without the node's number)


def check(seed: int, tmp_path=None) -> int:
    """Seed ``seed``'s model: compiled against eager, eager against torch, torch's ONNX
    export through ``dg.onnx.load`` against torch. Returns the comparisons made."""
    layers, shape, cores, passes, exportable = describe(seed)
    description = text(layers, shape, cores, passes)
    reference = build(layers, torch).eval()
    weights = state(reference, seed)
    reference.load_state_dict({k: torch.tensor(v) for k, v in weights.items()}, strict=False)
    model = build(layers, dg).eval()
    model.load_state_dict({k: dg.tensor(v) for k, v in weights.items()}, strict=False)
    compiled = dg.compile(model, passes=passes)
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]
    with torch.no_grad(), dg.no_grad(), using_cores(cores):
        for call, x in enumerate(xs):
            want = reference(torch.tensor(x)).numpy()
            eager = model(dg.tensor(x)).numpy()
            got = compiled(dg.tensor(x)).numpy()
            assert_close(eager, want, f"call {call}: eager vs torch", description)
            assert_close(got, eager, f"call {call}: compiled vs eager", description)
        HITS.update(reached(compiled))
        if not exportable:
            HITS["torch's ONNX export unsound (not loaded)"] += 1
            return 2 * len(xs)
        folder = tmp_path or os.environ.get("TMPDIR", "/tmp")
        path = os.path.join(str(folder), f"cnn_{os.getpid()}_{seed}.onnx")
        torch.onnx.export(reference, (torch.tensor(xs[0]),), path, dynamo=False,
                          input_names=["x"])
        try:
            loaded = dg.onnx.load(path)
        finally:
            os.remove(path)
        want = reference(torch.tensor(xs[1])).numpy()
        got = loaded(dg.tensor(xs[1]))
        got = got[0] if isinstance(got, (tuple, list)) else got
        assert_close(got.numpy(), want, "dg.onnx.load vs torch", description)
    return 2 * len(xs) + 1


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize("seed", range(FIRST, FIRST + EXAMPLES))
def test_generated_cnn_matches_eager_and_torch(seed, tmp_path):
    check(seed, tmp_path)


def counting_loops():
    """Count in ``HITS`` the packed 3x3 loop's work-item kinds (decided per call, by the
    shapes and the threads: its runner wrapped) and the pools taken on lanes."""
    from dualgraph.kernels import conv_packed, pool_lanes
    names = {conv_packed.NARROW: "NARROW", conv_packed.WIDE_PAIR: "WIDE_PAIR",
             conv_packed.WIDE_PAIRS: "WIDE_PAIRS", conv_packed.WIDE_ROWS: "WIDE_ROWS",
             conv_packed.WIDE_ROW_PAIR: "WIDE_ROW_PAIR"}
    run = conv_packed.run_kept

    def counted(loop, workers, entry, *args, **kwargs):
        stride, groups, mode = args[18], args[25], args[-1]
        HITS[f"conv_packed {names[mode]} stride {stride}" + (" grouped" if groups > 1
                                                                else "")] += 1
        return run(loop, workers, entry, *args, **kwargs)

    conv_packed.run_kept = counted
    fits = pool_lanes.fits

    def pooled(*args):
        taken = fits(*args)
        HITS["pool on lanes"] += taken
        return taken

    pool_lanes.fits = pooled


def main(argv=None) -> int:
    """The long campaign: ``--seeds 0:300`` (or ``--seed 17``); prints each failure and
    what the models reached."""
    args = campaign_parser(__doc__.splitlines()[0], EXAMPLES).parse_args(argv)
    warnings.simplefilter("ignore")   # (torch's exporter's deprecation and folding notes)
    counting_loops()

    def announced(seed):   # (a crash of the process names its seed)
        print(f"seed {seed}", flush=True)
        return check(seed)

    status = campaign(chosen_seeds(args, lambda seed: (text(*describe(seed)[:4]),)), announced,
                      NotImplementedError)
    for what, count in sorted(HITS.items()):
        print(f"{count:6d}  {what}")
    return status


if __name__ == "__main__":
    sys.exit(main())
