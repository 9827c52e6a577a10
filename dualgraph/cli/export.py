"""``dualgraph export MODULE:CALLABLE --shape 1,3,32,32 -o model.onnx``: trace a model on a
random example input of that shape and write it as an ONNX model.

``MODULE`` is imported as Python imports it (the current directory comes first on the
path); ``CALLABLE`` names an attribute of it (dotted for nested ones). A class is
instantiated with no arguments, ``name()`` is called with none (a factory that builds the
model), a module is put in eval mode; anything else callable is exported as it is. Give
``--shape`` once per input."""
from __future__ import annotations

import importlib
import os
import sys

HELP = "export MODULE:CALLABLE to ONNX, traced on an example input of --shape"


def add_arguments(parser) -> None:
    parser.add_argument("target", metavar="MODULE:CALLABLE",
                        help="e.g. mymodels:Net (a class), mymodels:make_net() (a factory)")
    parser.add_argument("--shape", action="append", required=True, metavar="D0,D1,...",
                        help="an example input's shape (once per input), e.g. 1,3,32,32")
    parser.add_argument("--dtype", default="float32",
                        help="the example inputs' dtype (default float32)")
    parser.add_argument("-o", "--output", default="model.onnx", help="default model.onnx")
    parser.add_argument("--opset", type=int, default=None, help="the ONNX opset to target")


def run(args) -> int:
    import dualgraph as dg
    try:
        model = resolve(args.target)
        shapes = [parse_shape(s) for s in args.shape]
        dtype = getattr(dg, args.dtype, None)
        if not isinstance(dtype, dg.dtype):
            raise ValueError(f"--dtype {args.dtype}: not a dtype (float32, int64, ...)")
    except (ImportError, AttributeError, ValueError, TypeError) as e:
        print(f"dualgraph export: {e}", file=sys.stderr)
        return 2
    dg.manual_seed(0)
    examples = tuple(dg.randn(*s).to(dtype) if dtype.is_floating_point
                     else dg.zeros(*s, dtype=dtype) for s in shapes)
    try:
        dg.onnx.export(model, examples, args.output, opset=args.opset)
    except (ValueError, TypeError, RuntimeError) as e:   # (OpError, OnnxError, ShapeError)
        shapes = ", ".join(str(tuple(s)) for s in shapes)
        print(f"dualgraph export: {args.target} on inputs of shape {shapes}: {e}",
              file=sys.stderr)
        return 1
    from .show import summary
    print(f"wrote {args.output}")
    print(summary(args.output), end="")
    return 0


def parse_shape(text: str) -> tuple[int, ...]:
    """``"1,3,32,32"`` -> ``(1, 3, 32, 32)``."""
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        dims = ()
    if not dims or min(dims) < 0:
        raise ValueError(f"--shape {text}: give sizes separated by commas, e.g. 1,3,32,32")
    return dims


def resolve(target: str):
    """The model ``MODULE:CALLABLE`` names (see the module docstring)."""
    module_name, sep, attr = target.partition(":")
    if not (sep and module_name and attr):
        raise ValueError(f"{target!r}: write MODULE:CALLABLE, e.g. mymodels:Net")
    if os.getcwd() not in sys.path:   # (the installed script does not put it there)
        sys.path.insert(0, os.getcwd())
    obj = importlib.import_module(module_name)
    call = attr.endswith("()")
    for part in attr.removesuffix("()").split("."):
        obj = getattr(obj, part)
    if call or isinstance(obj, type):
        obj = obj()
    if not callable(obj):
        raise TypeError(f"{target}: {type(obj).__name__} is not callable")
    if hasattr(obj, "eval") and hasattr(obj, "parameters"):
        obj.eval()
    return obj
