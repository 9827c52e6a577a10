"""Where a transformer's inference time goes, node by node, against onnxruntime's profile.

``python -m benchmarks.transformer_node_profile [--models vit,encoder,bert,gpt,t5]
[--batches 1,16] [--calls 5] [--nodes]``: one thread per engine, the models of
``benchmarks.unseen_transformers`` (the same weights in both libraries), measured as
``benchmarks.cnn_node_profile`` measures CNNs (dualgraph's compiled call under
``dg.profiler``, the torch export in onnxruntime with its own profiling). The nodes of
both engines are put into kinds by op and shapes:

- ``linear K->N``: a product by a 2-D weight (``K`` in, ``N`` out: the q/k/v or out
  projections, the MLP's up and down GEMMs, a head), with whatever epilogue the engine
  fused into it (dualgraph's bias, GELU, residual and LayerNorm; onnxruntime's
  ``FusedMatMul``/``Gemm`` bias);
- ``attention``: the products of 4-D operands (``QK^T``, the weights by ``V``), softmax,
  and the elementwise ops on the 4-D scores (scale, mask) or dualgraph's ``attention``;
- ``norm``: LayerNorm, RMSNorm and onnxruntime's ``SkipLayerNormalization`` (which adds
  the residual);
- ``gelu / erf``, ``bias add`` (onnxruntime's add of a 1-D bias after a product),
  ``elementwise`` (residual adds, the rest, dualgraph's fused groups), ``patch conv``,
  ``embedding gather``, ``glue`` (reshapes, transposes, slices, concatenations).

Each kind's time per call in both engines, the ratio and the gap (ours less onnxruntime's),
largest gap first; ``--nodes`` lists each kind's nodes.
"""
from __future__ import annotations

import argparse
import sys

from .cnn_node_profile import run   # (sets one thread before NumPy loads)

import numpy as np  # noqa: E402

from .unseen_transformers import MODELS, example  # noqa: E402

LINEAR_OPS = {"gemm", "matmul", "linear", "linear_epilogue", "linear_relu", "linear_norm",
              "linear_packed", "fusedgemm", "fusedmatmul", "matmulnbits"}
ATTENTION_OPS = {"attention", "softmax", "multiheadattention"}
NORM_OPS = {"layernormalization", "skiplayernormalization", "simplifiedlayernormalization",
            "skipsimplifiedlayernormalization", "layer_norm", "rms_norm"}
GELU_OPS = {"gelu", "erf", "biasgelu", "fastgelu", "tanh"}
GLUE_OPS = {"reshape", "transpose", "permute", "slice", "split", "concat", "cat", "squeeze",
            "unsqueeze", "expand", "flatten", "identity", "shape", "cast", "relayout",
            "view", "select", "contiguous", "unbind"}
GATHER_OPS = {"gather", "embedding", "take"}


def kind(op: str, shapes: list, out=None) -> str:
    """The kind of a node: its op (either engine's name), its input shapes and, where the
    engine reports it, its output's shape ``out`` (onnxruntime lists no weight it packed
    at load among a product's inputs)."""
    op = op.lower()
    shapes = [s for s in (shapes or []) if isinstance(s, (list, tuple))]
    if op in LINEAR_OPS and shapes:
        if op == "linear_packed":      # (x, the packed (panels, K, 32) weight, the bias (N,))
            return f"linear {shapes[0][-1]}->{shapes[2][0]}"
        if len(shapes) >= 2 and len(shapes[0]) >= 3 and len(shapes[1]) >= 3:
            return "attention (QK^T, scale, mask, softmax, V)"
        k = shapes[0][-1]
        if len(shapes) >= 2 and len(shapes[1]) == 2:   # (a weight (N, K) or (K, N))
            n = shapes[1][0] if shapes[1][1] == k else shapes[1][1]
        else:
            n = out[-1] if out else "?"
        return f"linear {k}->{n}"
    if op in ATTENTION_OPS:
        return "attention (QK^T, scale, mask, softmax, V)"
    if op in NORM_OPS:
        return "norm (layer, RMS; ORT's skip adds the residual)"
    if op in GELU_OPS:
        return "gelu / erf"
    if op == "conv" or op.startswith("conv2d"):
        return "patch conv"
    if op in GATHER_OPS:
        return "embedding gather"
    if op in GLUE_OPS:
        return "glue (reshape, transpose, slice, concat)"
    if shapes and len(shapes[0]) == 4:
        return "attention (QK^T, scale, mask, softmax, V)"
    if op == "add" and len(shapes) == 2 and len(shapes[1]) == 1:
        return "bias add"
    return "elementwise (residual adds, the rest)"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="vit,encoder,bert,gpt,t5")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--nodes", action="store_true")
    args = parser.parse_args(argv)
    run(MODELS, args.models.split(","), list(map(int, args.batches.split(","))), args.calls,
        args.nodes, lambda name, batch: example(name, batch, np.random.default_rng(0)), kind)


if __name__ == "__main__":
    sys.exit(main())
