"""Micro-benchmark: the packed 1x1 conv loop (``kernels/conv_pointpacked.py``) against the
path it replaced (the compiled ``conv2d_epilogue``'s GEMM and epilogue, OpenBLAS),
torch's conv with the same activation and onnxruntime's layer (its Conv, activation and
residual nodes), on the layers of ``benchmarks.pointwise_layers``
(stride 1) at batch 1 and 16, for the register block the loops are compiled for
(``conv_pointpacked.block_sums``: sixteen-lane sums where AVX-512 runs at full width, else
24 eight-lane sums with 32 registers, 12 with 16).

Run ``python -m benchmarks.isa_pointwise [--batches 1,16] [--rounds 7] [NAME-PART ...]``;
emulate an AVX2 host with ``NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=""
OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2``. One thread
per engine; best process CPU ms of ``--rounds`` calls in turns; each line gives ms and the
packed loop's ratio to the GEMM path, to torch and to onnxruntime.
"""
from __future__ import annotations

import os
import sys

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "DUALGRAPH_NUM_THREADS"):
    os.environ[_name] = "1"

import numpy as np  # noqa: E402

from .pointwise_layers import (LAYERS, best_ms, compiled_layer,  # noqa: E402
                               onnxruntime_layer)


def _torch_layer(x, w, b, act, r):
    import torch
    tx, tw, tb = map(torch.from_numpy, (x, w, b))
    tr = None if r is None else torch.from_numpy(r)
    fn = {"none": lambda y: y, "relu": torch.relu, "relu6": lambda y: torch.clamp(y, 0, 6),
          "silu": torch.nn.functional.silu, "hardswish": torch.nn.functional.hardswish,
          "sigmoid": torch.sigmoid}[act]

    def run():
        with torch.no_grad():
            y = fn(torch.nn.functional.conv2d(tx, tw, tb))
            return y if tr is None else y + tr
    return run


def _packed_layer(x, w, b, act, r):
    from dualgraph.kernels import conv_packed, conv_pointpacked
    from dualgraph.kernels.epilogue import ACTIVATIONS
    code = ACTIVATIONS.index("clamp" if act == "relu6" else act)
    lo, hi = (0.0, 6.0) if act == "relu6" else (-np.inf, np.inf)
    packed = conv_packed.pack(w)
    run = conv_pointpacked.fitted(x.shape, w.shape[0], r is not None,
                                  2 if r is not None else 0, code, lo, hi)
    residual = () if r is None else (r,)
    return lambda: run(x, packed, b, *residual)


def main(argv):
    import torch
    from dualgraph.kernels import conv_pointpacked, isa
    torch.set_num_threads(1)
    batches = [1, 16]
    rounds = 7
    if "--batches" in argv:
        batches = [int(v) for v in argv[argv.index("--batches") + 1].split(",")]
    if "--rounds" in argv:
        rounds = int(argv[argv.index("--rounds") + 1])
    parts = [a for i, a in enumerate(argv) if not a.startswith("--")
             and (i == 0 or argv[i - 1] not in ("--batches", "--rounds"))]
    print(f"target {isa.target()[0]}, {isa.vector_registers()} vector registers, block "
          f"{conv_pointpacked.block_sums()}; torch "
          f"{torch.backends.cpu.get_cpu_capability()}; load {os.getloadavg()[0]:.1f}; best "
          f"CPU ms of {rounds}, one thread")
    rng = np.random.default_rng(0)
    for name, c, cout, hw, stride, act, res in LAYERS:
        if stride != 1 or hw < 3 or (parts and not any(p in name for p in parts)):
            continue
        for n in batches:
            x = rng.standard_normal((n, c, hw, hw), dtype=np.float32)
            w = rng.standard_normal((cout, c, 1, 1), dtype=np.float32) / np.float32(np.sqrt(c))
            b = rng.standard_normal(cout, dtype=np.float32)
            r = rng.standard_normal((n, cout, hw, hw), dtype=np.float32) if res else None
            fns = {"packed": _packed_layer(x, w, b, act, r),
                   "gemm": compiled_layer(x, w, b, 1, act, r)[1],
                   "torch": _torch_layer(x, w, b, act, r),
                   "ort": onnxruntime_layer(x, w, b, 1, act, r)}
            ms = best_ms(fns, rounds)
            print(f"{name:18s} b{n:<3d} packed {ms['packed']:7.3f}  gemm {ms['gemm']:7.3f}  "
                  f"torch {ms['torch']:7.3f}  ort {ms['ort']:7.3f}  /gemm "
                  f"{ms['packed'] / ms['gemm']:4.2f}  /torch {ms['packed'] / ms['torch']:4.2f}  "
                  f"/ort {ms['packed'] / ms['ort']:4.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
