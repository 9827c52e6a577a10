"""CNNs outside the suite, for inference, one thread per engine: dualgraph (the module
``dg.compile``d and called under ``no_grad``; the torch export loaded with
``dg.onnx.load``) against onnxruntime (the same export) and torch eager.

``python -m benchmarks.unseen_cnns [--models squeezenet,efficientnet,mobilenetv3]
[--batches 1,16] [--rounds 5] [--threads=1] [--opt-in channels_last] [--exporter dynamo]``
(``--models resnet18,mobilenetv2``: the
suite's W8 and W9 models, measured the same way; ``--threads=2``: every engine on two
threads, set before NumPy loads OpenBLAS, so it must be spelt with ``=``). The models are written once against the torch-style API
(``lib`` is ``dualgraph`` or ``torch``), after torchvision's SqueezeNet 1.1,
EfficientNet-B0 (MBConv blocks with SiLU and squeeze-and-excitation), a
MobileNetV3-small-like stack (hard-swish, hard-sigmoid gates), and (``--models
shufflenetv2,densenet121,regnetx400mf,googlenet``) ShuffleNetV2 x1.0 (channel split and
shuffle), DenseNet-121 (pre-activation layers, dense concatenation), RegNetX-400MF
(grouped 3x3s of 16 channels a group), GoogLeNet (four-branch Inception blocks) and
(``convnext``) a ConvNeXt (7x7 depthwise convs, LayerNorm on permuted tensors), with
the same random weights in both libraries. Each implementation runs once per round, in turns; reported:
the best CPU time of a call (``time.process_time``: steadier than wall time on a shared
machine, and fair between one-thread engines) and the best wall time, in ms, and each
engine's ratio to onnxruntime's CPU time. Each timed call follows an untimed call of the
same engine, so it finds its own weights and buffers in the caches as a serving loop does
(timed right after another engine, a dualgraph module ran 5-7% slower than the same model's
ONNX import timed after it, whichever went first); on several threads also a pause
(``QUIET_S``: the engine timed before it would otherwise still be polling on its cores).
Outputs are compared with torch's first.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import tempfile
import time

THREADS = int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--threads=")), 1))
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "DUALGRAPH_NUM_THREADS"):
    os.environ[_name] = str(THREADS)

import numpy as np  # noqa: E402

from .common import random_state  # noqa: E402

OPT_IN: list = []   # opt-in lowering rules measured as engines of their own (``--opt-in``)
EXPORTERS = ("torchscript", "dynamo")
EXPORTER = ["torchscript"]   # torch's ONNX exporter for the ONNX engines (``--exporter``)


def fire(lib, cin, squeeze, expand):
    nn = lib.nn

    class Fire(nn.Module):
        def __init__(self):
            super().__init__()
            self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU())
            self.e1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU())
            self.e3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU())

        def forward(self, x):
            s = self.squeeze(x)
            return lib.cat([self.e1(s), self.e3(s)], 1)
    return Fire()


def squeezenet(lib, classes=1000):
    """torchvision's SqueezeNet 1.1."""
    nn = lib.nn
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, 2), nn.ReLU(), pool(),
        fire(lib, 64, 16, 64), fire(lib, 128, 16, 64), pool(),
        fire(lib, 128, 32, 128), fire(lib, 256, 32, 128), pool(),
        fire(lib, 256, 48, 192), fire(lib, 384, 48, 192), fire(lib, 384, 64, 256),
        fire(lib, 512, 64, 256),
        nn.Dropout(0.5), nn.Conv2d(512, classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten())


def conv_bn(lib, cin, cout, k, stride=1, groups=1, act=None):
    nn = lib.nn
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    return layers + ([getattr(nn, act)()] if act else [])


def mbconv(lib, cin, cout, k, stride, expand, act, gate, se_ratio):
    """An inverted residual block: 1x1 expansion, kxk depthwise, squeeze-and-excitation
    (``gate``: the gate's activation), 1x1 linear projection, residual when shapes
    allow."""
    nn = lib.nn
    hidden = cin * expand
    layers = conv_bn(lib, cin, hidden, 1, act=act) if expand != 1 else []
    layers += conv_bn(lib, hidden, hidden, k, stride, groups=hidden, act=act)
    squeezed = max(1, int(cin * se_ratio))
    se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(hidden, squeezed, 1),
                       getattr(nn, act)(), nn.Conv2d(squeezed, hidden, 1), getattr(nn, gate)())
    project = nn.Sequential(*conv_bn(lib, hidden, cout, 1))
    body = nn.Sequential(*layers)
    residual = stride == 1 and cin == cout

    class MBConv(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.se, self.project = body, se, project

        def forward(self, x):
            h = self.body(x)
            y = self.project(h * self.se(h))
            return x + y if residual else y
    return MBConv()


def efficientnet(lib, classes=1000):
    """EfficientNet-B0's stages (expansion, channels, blocks, stride, kernel)."""
    nn = lib.nn
    stages = [(1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3),
              (6, 112, 3, 1, 5), (6, 192, 4, 2, 5), (6, 320, 1, 1, 3)]
    layers, cin = conv_bn(lib, 3, 32, 3, 2, act="SiLU"), 32
    for expand, cout, count, stride, k in stages:
        for i in range(count):
            layers.append(mbconv(lib, cin, cout, k, stride if i == 0 else 1, expand, "SiLU",
                                 "Sigmoid", 0.25))
            cin = cout
    layers += conv_bn(lib, cin, 1280, 1, act="SiLU")
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(1280, classes))


def mobilenetv3(lib, classes=1000):
    """A MobileNetV3-small-like stack: hard-swish and ReLU blocks, hard-sigmoid gates."""
    nn = lib.nn
    blocks = [(3, 1, 16, "ReLU", 2), (3, 4, 24, "ReLU", 2), (3, 3, 24, "ReLU", 1),
              (5, 4, 40, "Hardswish", 2), (5, 6, 40, "Hardswish", 1),
              (5, 3, 48, "Hardswish", 1), (5, 6, 96, "Hardswish", 2),
              (5, 6, 96, "Hardswish", 1)]
    layers, cin = conv_bn(lib, 3, 16, 3, 2, act="Hardswish"), 16
    for k, expand, cout, act, stride in blocks:
        layers.append(mbconv(lib, cin, cout, k, stride, expand, act, "Hardsigmoid", 0.25))
        cin = cout
    layers += conv_bn(lib, cin, 576, 1, act="Hardswish")
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(576, 1024), nn.Hardswish(), nn.Linear(1024, classes))


def shuffle_unit(lib, cin, cout, stride):
    """ShuffleNetV2's unit: stride 1 splits the channels in two and transforms one half
    (1x1, 3x3 depthwise, 1x1); stride 2 transforms the whole input in two branches; the
    halves are concatenated and their channels shuffled (view, transpose, flatten)."""
    nn = lib.nn
    half = cout // 2
    branch_in = cin if stride == 2 else half
    main = nn.Sequential(*conv_bn(lib, branch_in, half, 1, act="ReLU"),
                         *conv_bn(lib, half, half, 3, stride, groups=half),
                         *conv_bn(lib, half, half, 1, act="ReLU"))
    side = (nn.Sequential(*conv_bn(lib, cin, cin, 3, stride, groups=cin),
                          *conv_bn(lib, cin, half, 1, act="ReLU")) if stride == 2 else None)

    class ShuffleUnit(nn.Module):
        def __init__(self):
            super().__init__()
            self.main, self.side = main, side

        def forward(self, x):
            if self.side is None:
                a, b = x.chunk(2, 1)
                y = lib.cat([a, self.main(b)], 1)
            else:
                y = lib.cat([self.side(x), self.main(x)], 1)
            n, c, h, w = y.shape
            return y.view(n, 2, c // 2, h, w).transpose(1, 2).flatten(1, 2)
    return ShuffleUnit()


def shufflenetv2(lib, classes=1000):
    """ShuffleNetV2 x1.0: stages of 4, 8, 4 units (116, 232, 464 channels)."""
    nn = lib.nn
    layers, cin = [*conv_bn(lib, 3, 24, 3, 2, act="ReLU"), nn.MaxPool2d(3, 2, 1)], 24
    for cout, count in ((116, 4), (232, 8), (464, 4)):
        for i in range(count):
            layers.append(shuffle_unit(lib, cin, cout, 2 if i == 0 else 1))
            cin = cout
    layers += conv_bn(lib, cin, 1024, 1, act="ReLU")
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(1024, classes))


def dense_layer(lib, cin, growth):
    """DenseNet's pre-activation layer (BN-ReLU-1x1 to 4*growth, BN-ReLU-3x3 to growth),
    its output concatenated to its input."""
    nn = lib.nn
    body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 4 * growth, 1, bias=False),
                         nn.BatchNorm2d(4 * growth), nn.ReLU(),
                         nn.Conv2d(4 * growth, growth, 3, 1, 1, bias=False))

    class DenseLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = body

        def forward(self, x):
            return lib.cat([x, self.body(x)], 1)
    return DenseLayer()


def densenet(lib, classes=1000, blocks=(6, 12, 24, 16), growth=32):
    """DenseNet-121: four dense blocks joined by transitions (BN-ReLU-1x1 halving the
    channels, 2x2 average pooling)."""
    nn = lib.nn
    layers, cin = [*conv_bn(lib, 3, 64, 7, 2, act="ReLU"), nn.MaxPool2d(3, 2, 1)], 64
    for i, count in enumerate(blocks):
        for _ in range(count):
            layers.append(dense_layer(lib, cin, growth))
            cin += growth
        if i < len(blocks) - 1:
            layers += [nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, cin // 2, 1, bias=False),
                       nn.AvgPool2d(2, 2)]
            cin //= 2
    return nn.Sequential(*layers, nn.BatchNorm2d(cin), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(cin, classes))


def regnet_block(lib, cin, cout, stride, group_width=16):
    """RegNetX's residual bottleneck of ratio 1: 1x1, grouped 3x3 (groups of
    ``group_width`` channels), 1x1, each with BN, ReLU after the sum."""
    nn = lib.nn
    body = nn.Sequential(*conv_bn(lib, cin, cout, 1, act="ReLU"),
                         *conv_bn(lib, cout, cout, 3, stride, cout // group_width, act="ReLU"),
                         *conv_bn(lib, cout, cout, 1))
    short = (nn.Sequential(*conv_bn(lib, cin, cout, 1, stride))
             if stride != 1 or cin != cout else None)

    class RegNetBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.short, self.relu = body, short, nn.ReLU()

        def forward(self, x):
            return self.relu(self.body(x) + (x if self.short is None else self.short(x)))
    return RegNetBlock()


def regnetx(lib, classes=1000):
    """RegNetX-400MF: stages of depth 1, 2, 7, 12 and width 32, 64, 160, 384."""
    nn = lib.nn
    layers, cin = conv_bn(lib, 3, 32, 3, 2, act="ReLU"), 32
    for cout, depth in ((32, 1), (64, 2), (160, 7), (384, 12)):
        for i in range(depth):
            layers.append(regnet_block(lib, cin, cout, 2 if i == 0 else 1))
            cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(cin, classes))


def inception(lib, cin, c1, c3r, c3, c5r, c5, pool):
    """GoogLeNet's Inception block: 1x1; 1x1-3x3; 1x1-3x3 (torchvision's "5x5" branch);
    3x3 max pooling (stride 1, padding 1)-1x1; the four concatenated."""
    nn = lib.nn
    cbr = lambda i, o, k: nn.Sequential(*conv_bn(lib, i, o, k, act="ReLU"))
    branches = [cbr(cin, c1, 1), nn.Sequential(cbr(cin, c3r, 1), cbr(c3r, c3, 3)),
                nn.Sequential(cbr(cin, c5r, 1), cbr(c5r, c5, 3)),
                nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), cbr(cin, pool, 1))]

    class Inception(nn.Module):
        def __init__(self):
            super().__init__()
            self.branches = nn.ModuleList(branches)

        def forward(self, x):
            return lib.cat([b(x) for b in self.branches], 1)
    return Inception()


def googlenet(lib, classes=1000):
    """GoogLeNet (Inception v1, torchvision's layout with BN, no auxiliary heads; every
    downsampling max pool 3x3/2 in ceil mode, where torchvision's last is 2x2/2: the same
    sizes)."""
    nn = lib.nn
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)
    spec = [(192, 64, 96, 128, 16, 32, 32), (256, 128, 128, 192, 32, 96, 64), "pool",
            (480, 192, 96, 208, 16, 48, 64), (512, 160, 112, 224, 24, 64, 64),
            (512, 128, 128, 256, 24, 64, 64), (512, 112, 144, 288, 32, 64, 64),
            (528, 256, 160, 320, 32, 128, 128), "pool",
            (832, 256, 160, 320, 32, 128, 128), (832, 384, 192, 384, 48, 128, 128)]
    layers = [*conv_bn(lib, 3, 64, 7, 2, act="ReLU"), pool(),
              *conv_bn(lib, 64, 64, 1, act="ReLU"), *conv_bn(lib, 64, 192, 3, act="ReLU"),
              pool()]
    layers += [pool() if s == "pool" else inception(lib, *s) for s in spec]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                         nn.Linear(1024, classes))


def convnext(lib, classes=1000, dims=(40, 80, 160, 320), depths=(2, 2, 6, 2)):
    """A ConvNeXt (timm's "atto" sizes): a 4x4/4 patch stem, blocks of a 7x7 depthwise
    conv, LayerNorm over channels on the permuted (N, H, W, C) tensor, a GELU MLP of
    ``nn.Linear``s and a per-channel layer scale on the residual; between stages a
    channels-first LayerNorm (permute, normalise, permute back) and a 2x2/2 conv."""
    nn = lib.nn

    class ChannelsFirstNorm(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.norm = nn.LayerNorm(dim, eps=1e-6)

        def forward(self, x):
            return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class Block(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.pwconv1, self.act = nn.Linear(dim, 4 * dim), nn.GELU()
            self.pwconv2 = nn.Linear(4 * dim, dim)
            self.gamma = nn.Parameter(0.1 * lib.ones(dim))

        def forward(self, x):
            y = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
            y = self.pwconv2(self.act(self.pwconv1(y))) * self.gamma
            return x + y.permute(0, 3, 1, 2)

    layers = [nn.Conv2d(3, dims[0], 4, stride=4), ChannelsFirstNorm(dims[0])]
    for i, (dim, depth) in enumerate(zip(dims, depths)):
        if i:
            layers += [ChannelsFirstNorm(dims[i - 1]), nn.Conv2d(dims[i - 1], dim, 2, stride=2)]
        layers += [Block(dim) for _ in range(depth)]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.LayerNorm(dims[-1], eps=1e-6), nn.Linear(dims[-1], classes))

def suite_model(module: str, name: str):
    """A workload's model (W8's ResNet-18, W9's MobileNetV2), measured the same way."""
    return lambda lib: getattr(importlib.import_module(f"benchmarks.{module}"), name)(lib)


MODELS = {"squeezenet": squeezenet, "efficientnet": efficientnet, "mobilenetv3": mobilenetv3,
          "shufflenetv2": shufflenetv2, "densenet121": densenet, "regnetx400mf": regnetx,
          "googlenet": googlenet, "convnext": convnext,
          "resnet18": suite_model("w8_resnet18_infer", "resnet18"),
          "mobilenetv2": suite_model("w9_mobilenet_infer", "mobilenet_v2")}


def implementations(name: str, batch: int, tmp: str) -> dict:
    """``{engine: (call, output of one call)}`` for one model and batch size."""
    import torch

    import dualgraph as dg
    torch.set_num_threads(THREADS)
    dg.set_num_threads(THREADS)
    rng = np.random.default_rng(0)
    reference = MODELS[name](torch).eval()
    state = random_state(reference, 0)
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    model = MODELS[name](dg).eval()
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    x = rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
    return engines(reference, model, x, os.path.join(tmp, f"{name}_{batch}.onnx"), THREADS)


def export_onnx(reference, x: np.ndarray, path: str) -> None:
    """The torch module ``reference`` exported to ``path`` by the exporter ``--exporter``
    names: ``torchscript`` (``dynamo=False``) or ``dynamo`` (torch.export and onnxscript,
    ``torch.onnx.export``'s default since torch 2.9: opset 18+, other patterns)."""
    import torch
    with torch.no_grad():
        if EXPORTER[0] == "torchscript":
            torch.onnx.export(reference, (torch.tensor(x),), path, dynamo=False,
                              input_names=["x"])
            return
        logging.disable(logging.WARNING)    # (its progress lines)
        try:
            program = torch.onnx.export(reference, (torch.tensor(x),), dynamo=True,
                                        input_names=["x"], verbose=False)
        finally:
            logging.disable(logging.NOTSET)
        program.save(path)


def engines(reference, model, x: np.ndarray, path: str, threads: int) -> dict:
    """``{engine: (call, output of one call)}`` of the torch module ``reference`` and the
    dualgraph module ``model`` (same weights) on the input ``x``: onnxruntime and
    ``dg.onnx.load`` run ``reference``'s export (written to ``path``)."""
    import onnxruntime as ort
    import torch

    import dualgraph as dg
    export_onnx(reference, x, path)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    loaded = dg.onnx.load(path)
    compiled = dg.compile(model)
    tx, dx = torch.tensor(x), dg.tensor(x)

    def run_compiled(compiled=compiled):
        with dg.no_grad():
            return compiled(dx).numpy()

    def run_torch():
        with torch.no_grad():
            return reference(tx).numpy()
    calls = {"onnxruntime": lambda: session.run(None, {"x": x})[0],
             "dg_compiled": run_compiled,
             "dg_onnx_load": lambda: np.asarray(loaded(dx).numpy()),
             "torch_eager": run_torch}
    for rule in OPT_IN:   # (the opt-in lowering rules asked for: one engine each)
        opted = dg.compile(model, passes={rule: True})
        calls[f"dg_compiled+{rule}"] = lambda opted=opted: run_compiled(opted)
    return {k: (f, f()) for k, f in calls.items()}


def measure(name: str, batch: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        return compare(implementations(name, batch, tmp), rounds)


# With more than one thread, each engine's pool keeps polling for work after a call:
# onnxruntime's intra-op workers, OpenMP's (torch) and OpenBLAS's (NumPy, dualgraph) for
# up to ~0.1 s. Timed right after another engine, an engine shares its cores with that
# engine's polling threads (a dg.compile'd CNN timed after onnxruntime ran 2-4x slower
# than its own ONNX import timed after it). So on several threads every engine's timed
# call follows a pause of QUIET_S, in which the others' pools go idle (and, on any number
# of threads, one untimed call of its own, which wakes its own pool as a run of
# inferences keeps it awake).
QUIET_S = 0.3


def compare(impls: dict, rounds: int, threads: int = THREADS) -> dict:
    """Each engine of ``impls`` (:func:`engines`) timed once per round, in turns, after
    an untimed call of its own (on several ``threads`` also after ``QUIET_S``): its best
    CPU and wall times, its CPU time over onnxruntime's, its output's error against
    torch's. The turns rotate by one engine a round, so no engine always follows the
    same one (whichever engine follows another pays for the cache state that one left:
    0.05-0.1 ms at batch 1)."""
    want = impls["torch_eager"][1]
    cpu = {k: np.inf for k in impls}
    wall = dict(cpu)
    order = list(impls)
    for r in range(rounds):
        for k in order[r % len(order):] + order[:r % len(order)]:
            call = impls[k][0]
            if threads > 1:
                time.sleep(QUIET_S)
            call()
            c, w = time.process_time(), time.perf_counter()
            call()
            cpu[k] = min(cpu[k], time.process_time() - c)
            wall[k] = min(wall[k], time.perf_counter() - w)
    error = {k: float(np.abs(out - want).max() / max(1e-6, np.abs(want).max()))
             for k, (_, out) in impls.items()}
    return {k: dict(cpu_ms=round(1e3 * cpu[k], 2), wall_ms=round(1e3 * wall[k], 2),
                    vs_onnxruntime=round(cpu[k] / cpu["onnxruntime"], 2),
                    rel_error=f"{error[k]:.1e}") for k in impls}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="squeezenet,efficientnet,mobilenetv3")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="read before NumPy loads")
    parser.add_argument("--opt-in", default="", help="opt-in lowering rules (comma-separated, "
                        "e.g. channels_last), each measured as one more compiled engine")
    parser.add_argument("--exporter", default="torchscript", choices=EXPORTERS,
                        help="torch's ONNX exporter for onnxruntime and dg.onnx.load")
    args = parser.parse_args(argv)
    OPT_IN[:] = [r for r in args.opt_in.split(",") if r]
    EXPORTER[:] = [args.exporter]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, {THREADS} "
          "thread(s) per engine", flush=True)
    for name in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            for engine, row in measure(name, batch, args.rounds).items():
                print(f"{name} batch {batch} {engine}: {row}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
