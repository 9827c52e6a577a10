"""Micro-benchmark: 1x1 convolutions on the packed weight (``kernels/conv_pointpacked.py``,
what a compiled graph runs for a 1x1 conv whose weight is a constant) with an input taken
as streamed from memory (``conv_pointpacked.STREAM_BYTES``: the next block of rows asked
into L2, 32 input channels a block where the outputs are few) against the same loop with
every input taken as cached (the loop before streaming), and onnxruntime's Conv + Relu.

``python -m benchmarks.streamed_pointwise [--batches 1,16] [--rounds 5] [NAME-PART ...]``:
one thread per engine. Each timed call follows a copy into its input (untimed), so that
each engine finds it where a model's previous layer leaves it, whatever ran before (timed
right after the other loop's call on the same input, the cached loop found it in cache:
0.7-0.9x its time after a fresh write), and every other round runs the engines in the
reverse order (the loop timed after onnxruntime's call at every round ran 1.1-1.15x the
time of the same loop timed after it, on large weights at batch 1). The layers are
fire modules' squeezes and expands (SqueezeNet), Inception reductions (GoogLeNet),
DenseNet bottlenecks, MobileNet expansions and projections, a 512 -> 1000 classifier on
13x13, RegNetX-400MF's 1x1s and odd shapes. Times: the best process CPU time of
``--rounds`` calls, engines in turns; each line gives ms and the ratios; both of the
loop's outputs are checked to be the same bits, and against onnxruntime's.
"""
from __future__ import annotations

import argparse
import os
import time

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DUALGRAPH_NUM_THREADS"):
    os.environ[_name] = "1"

import numpy as np  # noqa: E402

from .pointwise_layers import onnxruntime_layer  # noqa: E402

# name, in channels, out channels, plane
LAYERS = [
    ("sq squeeze 64>16 55", 64, 16, 55), ("sq squeeze 128>16 55", 128, 16, 55),
    ("sq squeeze 128>32 27", 128, 32, 27), ("sq squeeze 256>32 27", 256, 32, 27),
    ("sq squeeze 512>64 13", 512, 64, 13), ("sq expand 16>64 55", 16, 64, 55),
    ("sq expand 32>128 27", 32, 128, 27), ("sq classifier 512>1000 13", 512, 1000, 13),
    ("gn reduce 192>16 28", 192, 16, 28), ("gn reduce 480>96 14", 480, 96, 14),
    ("gn 1x1 256>128 28", 256, 128, 28), ("dn bottleneck 1024>128 14", 1024, 128, 14),
    ("mb 24>144 56", 24, 144, 56), ("mb 96>24 56", 96, 24, 56),
    ("mb 576>96 14", 576, 96, 14), ("mb 320>1280 7", 320, 1280, 7),
    ("odd 40>100 75", 40, 100, 75), ("odd 700>90 5", 700, 90, 5),
    ("odd 50>20 33", 50, 20, 33), ("odd 200>72 9", 200, 72, 9),
    ("rn 384>384 7", 384, 384, 7), ("rn 160>160 14", 160, 160, 14),
    ("rn 32>32 112", 32, 32, 112), ("rn 160>384 14", 160, 384, 14),
]


def measure(name, cin, cout, size, batch, rounds) -> dict:
    from dualgraph.kernels import conv_packed, conv_pointpacked
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, cin, size, size), dtype=np.float32)
    w = rng.standard_normal((cout, cin, 1, 1), dtype=np.float32) / np.float32(np.sqrt(cin))
    b = rng.standard_normal(cout, dtype=np.float32)
    wp = conv_packed.pack(w)
    streamed = conv_pointpacked.fitted(x.shape, cout, False, act=1)
    kept = conv_pointpacked.STREAM_BYTES
    conv_pointpacked.STREAM_BYTES = np.inf      # (every input taken as cached)
    try:
        cached = conv_pointpacked.fitted(x.shape, cout, False, act=1)
    finally:
        conv_pointpacked.STREAM_BYTES = kept
    ort = onnxruntime_layer(x, w, b, 1, "relu", None)
    calls = {"streamed": lambda: streamed(x, wp, b), "cached": lambda: cached(x, wp, b),
             "ort": ort}
    np.testing.assert_array_equal(calls["streamed"](), calls["cached"]())
    np.testing.assert_allclose(calls["streamed"](), ort(), rtol=1e-4, atol=1e-4)
    for f in calls.values():
        f()
    best = dict.fromkeys(calls, np.inf)
    source = x.copy()
    order = list(calls.items())
    for r in range(rounds):
        for k, f in order if r % 2 else order[::-1]:    # (after another engine in turn)
            np.copyto(x, source)    # (written just before, as a model's previous layer does)
            start = time.process_time()
            f()
            best[k] = min(best[k], 1e3 * (time.process_time() - start))
    best["taken"] = batch * cin * size * size * 4 > kept
    return best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}; ms (one thread), ratios; 'streamed': "
          "the input is over STREAM_BYTES")
    for batch in map(int, args.batches.split(",")):
        for layer in LAYERS:
            if args.names and not any(part in layer[0] for part in args.names):
                continue
            m = measure(*layer, batch, args.rounds)
            print(f"{layer[0]:26s} b{batch:<2d} {'streamed' if m['taken'] else 'cached  '} "
                  f"loop {m['streamed']:7.3f} cached {m['cached']:7.3f} ort {m['ort']:7.3f}  "
                  f"loop/cached {m['streamed'] / m['cached']:4.2f} loop/ort "
                  f"{m['streamed'] / m['ort']:4.2f} cached/ort {m['cached'] / m['ort']:4.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
