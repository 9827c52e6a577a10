"""Writes docs/reference/missing.md: the public names of PyTorch that dualgraph lacks.

    python tools/gen_missing_names_doc.py           # rewrite the page (needs torch 2.13.0)
    python tools/gen_missing_names_doc.py --check   # exit 1 if the committed page is stale

For each namespace a PyTorch program imports from (`torch`, `torch.Tensor`,
`torch.nn`, `torch.nn.functional`, `torch.optim`, `torch.optim.lr_scheduler`,
`torch.utils.data`), the public names of the pinned torch (the `test` extra) with no
counterpart of the same name in dualgraph. A name present in both may still differ in
detail: docs/porting.md lists those differences.
"""
from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference" / "missing.md"
# Backend- and build-specific families of torch's top level (kernels of other devices,
# quantisation, internal fused ops): listed by prefix, not name by name.
FAMILIES = ("cudnn_", "miopen_", "mkldnn_", "fbgemm_", "quantize", "quantized_", "q_",
            "native_", "sym_", "sparse_", "segment_", "batch_norm_", "fused_", "xpu", "mps")


def _public(obj) -> set:
    return {name for name in dir(obj) if not name.startswith("_")}


def namespaces():
    """(torch name, its object, dualgraph's object, which names count)."""
    import torch
    import torch.nn.functional
    import torch.utils.data

    import dualgraph as dg

    def functions(mod):
        return {n for n in _public(mod) if callable(getattr(mod, n))
                and not inspect.isclass(getattr(mod, n)) and not inspect.ismodule(getattr(mod, n))
                and (getattr(getattr(mod, n), "__module__", "") or "").startswith("torch")}

    def classes(mod, base=object):
        return {n for n in _public(mod) if inspect.isclass(getattr(mod, n))
                and issubclass(getattr(mod, n), base)
                and getattr(mod, n).__module__.startswith("torch")}

    return [
        ("torch (functions)", functions(torch), dg),
        ("torch.Tensor (methods and attributes)", _public(torch.Tensor), dg.Tensor),
        ("torch.nn (modules)", classes(torch.nn, torch.nn.Module), dg.nn),
        ("torch.nn.functional", functions(torch.nn.functional), dg.nn.functional),
        ("torch.optim", classes(torch.optim), dg.optim),
        ("torch.optim.lr_scheduler", classes(torch.optim.lr_scheduler),
         dg.optim.lr_scheduler),
        ("torch.utils.data", _public(torch.utils.data) - {"graph", "datapipes"}
         - {n for n in _public(torch.utils.data)
            if inspect.ismodule(getattr(torch.utils.data, n))}, dg.utils.data),
    ]


def render() -> str:
    import torch
    lines = [
        "# PyTorch names dualgraph does not have (generated)", "",
        "<!-- Written by `python tools/gen_missing_names_doc.py`; do not edit by hand. -->", "",
        (f"The public names of PyTorch {torch.__version__.split('+')[0]} (the version the "
         "tests compare with) that have no counterpart of the same name in dualgraph, "
         "namespace by namespace. A script that uses one of them fails with an "
         "`AttributeError` or `ImportError` naming it. Names present in both may still differ "
         "in detail: [Porting from PyTorch](../porting.md) lists those differences. This page "
         "is written by `python tools/gen_missing_names_doc.py`; a test fails when it is out "
         "of date."), ""]
    for title, names, ours in namespaces():
        missing = sorted(n for n in names if not hasattr(ours, n))
        families = [f for f in FAMILIES if any(n.startswith(f) for n in missing)]
        missing = [n for n in missing if not n.startswith(FAMILIES)]
        lines += [f"## {title}: {len(missing)} names", ""]
        lines.append(", ".join(f"`{n}`" for n in missing) or "(none)")
        if families:
            lines += ["", "Also the families " + ", ".join(f"`{f}*`" for f in families)
                      + " (other devices' kernels, quantisation and internal ops)."]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    text = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run "
                  "python tools/gen_missing_names_doc.py", file=sys.stderr)
            return 1
        return 0
    tmp = PAGE.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(PAGE)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
