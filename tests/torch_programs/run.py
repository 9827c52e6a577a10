"""Run one program of this folder and print its results as JSON: ``python run.py NAME MODE
STEPS`` with MODE ``torch`` (real PyTorch) or, with ``import torch`` answered by dualgraph
through ``dualgraph.compat.install_torch_alias``, ``eager``, ``compiled`` (the training
step compiled) or ``compiled_model`` (``model = torch.compile(model)``). A fresh process
each time, so that the alias and the real torch never share one."""
import importlib.util
import json
import pathlib
import sys


def _recording_compile(compiled):
    """``dualgraph.compile`` that keeps what it returns, to report how each call ran."""
    import dualgraph
    real = dualgraph.compile

    def compile(*args, **kwargs):
        out = real(*args, **kwargs)
        compiled.append(out)
        return out
    dualgraph.compile = compile


def _summary(compiled):
    """For each compiled object: its graphs, graph breaks and retrace-limit fallbacks."""
    out = []
    for c in compiled:
        c = getattr(c, "_compiled", c)
        kinds = [r.kind for r in c.records]
        # (a split function's pieces are graphs too, as explain() counts them, and so are
        # the graphs of a signature traced for other cases of its slices' clamps)
        graphs = sum(1 + len(getattr(e, "cases", ())) for e in c.cache.values())
        out.append({"graphs": graphs + kinds.count("piece"),
                    "breaks": kinds.count("break"),
                    "limit": kinds.count("limit"), "explain": c.explain()})
    return out


def run(name, mode, steps):
    compiled = []
    if mode != "torch":
        import dualgraph.compat
        dualgraph.compat.install_torch_alias()
        _recording_compile(compiled)
    path = pathlib.Path(__file__).with_name(name + ".py")
    spec = importlib.util.spec_from_file_location(f"torch_program_{name}", path)
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    compile = {"torch": False, "eager": False, "compiled": True, "compiled_model": "model"}
    result = program.main(steps, compile=compile[mode])
    import torch
    result["framework"] = torch.__name__
    result["compiled"] = _summary(compiled)
    return result


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
