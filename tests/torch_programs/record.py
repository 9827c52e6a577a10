"""Record what real PyTorch gives for each program of this folder, so that the tests compare
dualgraph against those numbers without starting PyTorch 73 times per run:
``python tests/torch_programs/record.py [NAME ...]`` (all programs by default) runs each one
under real PyTorch (``run.py NAME torch STEPS``, a fresh process each) and writes
``torch_results.json`` atomically.

Each entry is keyed by what decides the result: a hash of the program's source (with
``run.py`` and the sibling programs it loads) and the PyTorch version. ``reference`` returns
an entry only while that key still matches; otherwise the tests run PyTorch live, so an
edited program is never compared against a stale recording."""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "torch_results.json"


def source_key(name: str) -> str:
    """sha256 of run.py, the program, and the sibling programs it names (``"vae.py"``)."""
    text = (HERE / f"{name}.py").read_text()
    loaded = sorted(set(re.findall(r"[\"']([a-z0-9_]+)\.py[\"']", text)) - {name})
    digest = hashlib.sha256()
    for path in [HERE / "run.py", HERE / f"{name}.py"] + [HERE / f"{n}.py" for n in loaded]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def torch_version() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def run_live(name: str, mode: str, steps: int) -> dict:
    """One program run in a fresh process (``run.py``), its JSON result."""
    env = dict(os.environ, PYTHONPATH=str(HERE.parent.parent))
    proc = subprocess.run([sys.executable, str(HERE / "run.py"), name, mode, str(steps)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} ({mode}, {steps} steps) failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def reference(name: str, steps: int, recorded: dict | None = None) -> dict | None:
    """The recorded PyTorch result of ``name`` over ``steps`` steps, or None where there is
    none for this source and this PyTorch version."""
    if recorded is None:
        recorded = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    entry = recorded.get(name)
    if (entry and entry["source"] == source_key(name) and entry["steps"] == steps
            and entry["torch"] == torch_version()):
        return entry["result"]
    return None


def record(names: list[str], steps_of) -> None:
    """Run ``names`` under PyTorch and merge their results into ``torch_results.json``."""
    recorded = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for name in names:
        steps = steps_of(name)
        print(f"{name}: {steps} steps", flush=True)
        recorded[name] = {"source": source_key(name), "torch": torch_version(),
                          "steps": steps, "result": run_live(name, "torch", steps)}
    text = json.dumps(dict(sorted(recorded.items())), indent=1) + "\n"
    fd, tmp = tempfile.mkstemp(dir=HERE, prefix=".torch_results.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, RESULTS)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    from test_torch_programs import PROGRAMS, steps_of
    # (by default every program and every one recorded before: bf16_autocast and
    # vae_classic have tests of their own, outside PROGRAMS)
    known = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    record(sys.argv[1:] or sorted(set(PROGRAMS) | set(known)), steps_of)
