"""The CPU the loops are compiled for (``kernels/isa.py``): read from the environment as
Numba's JIT reads it, so that an emulated AVX2 host (``NUMBA_CPU_NAME=haswell
NUMBA_CPU_FEATURES=""``) and a real one choose the same loops, and machine code compiled
for one is not reused for the other."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")

_REPORT = """
import json
from dualgraph.kernels import isa, native
from numba.core.registry import cpu_target
codegen = cpu_target.target_context.codegen()
print(json.dumps({"ours": isa.target(), "registers": isa.vector_registers(),
                  "full_width": isa.full_width(),
                  "numba": [codegen._get_host_cpu_name(), codegen._tm_features],
                  "key": native._environment()}))
"""

CASES = {   # environment -> vector registers (None: the host's)
    "host": ({}, None),
    "haswell": ({"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": ""}, 16),
    "haswell with the host's features": ({"NUMBA_CPU_NAME": "haswell"}, None),
    "generic": ({"NUMBA_CPU_NAME": "generic"}, 16),
    "skylake-avx512": ({"NUMBA_CPU_NAME": "skylake-avx512", "NUMBA_CPU_FEATURES": ""}, 32),
    "explicit list": ({"NUMBA_CPU_NAME": "znver4", "NUMBA_CPU_FEATURES": "+avx2,-avx512vl"},
                      16),
    "no AVX": ({"NUMBA_ENABLE_AVX": "0"}, 16),
    "zen 4": ({"NUMBA_CPU_NAME": "znver4", "NUMBA_CPU_FEATURES": "+avx2,+avx512f,+avx512vl"},
              32),
}


def _report(env: dict) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU_")
             and k != "NUMBA_ENABLE_AVX"}
    out = subprocess.run([sys.executable, "-c", _REPORT], env={**clean, **env},
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def reports():
    return {name: _report(env) for name, (env, _) in CASES.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_target_is_what_numba_compiles_for(reports, case):
    report, registers = reports[case], CASES[case][1]
    ours, numba = report["ours"], report["numba"]
    assert ours[0] == numba[0]
    assert set(ours[1].split(",")) == set(numba[1].split(","))
    host = reports["host"]["registers"]
    assert report["registers"] == (host if registers is None else registers)


def test_the_host_with_its_features_keeps_its_registers(reports):
    """``NUMBA_CPU_NAME`` alone takes the host's features: no emulation of a smaller CPU."""
    assert reports["haswell with the host's features"]["registers"] == \
        reports["host"]["registers"]


def test_sixteen_lanes_where_avx512_runs_at_full_width(reports):
    """``isa.full_width``: an AVX-512 Intel target yes; Zen 4 (its 512-bit multiply-adds
    two 256-bit halves), AVX2 and SSE no."""
    assert reports["skylake-avx512"]["full_width"]
    for name in ("zen 4", "haswell", "generic", "no AVX"):
        assert not reports[name]["full_width"], name


def test_native_code_is_kept_apart_by_target(reports):
    keys = {json.dumps(r["key"]) for r in reports.values()}
    assert len(keys) == len(reports)


def test_the_probe_matches_the_code_numba_makes():
    """On an AVX-512VL target Numba's own code for a 64-bit shift of four lanes is the one
    ``ymm`` instruction the probe looks for; on Haswell it is not."""
    import numba
    import numpy as np
    from dualgraph.kernels import isa

    @numba.njit
    def shift(a):
        for i in range(4):
            a[i] >>= 3
    shift(np.zeros(4, np.int64))
    asm = next(iter(shift.inspect_asm().values()))
    has = any("vpsraq" in line and "ymm" in line for line in asm.splitlines())
    assert not has or isa.vector_registers() == 32
    assert isa._registers("haswell", "") == 16
    assert isa._registers("haswell", "+avx512f,+avx512vl") == 32


@pytest.mark.parametrize("name,features,full", [
    ("skylake-avx512", "", True), ("znver4", "", False), ("haswell", "", False),
    ("znver4", "+avx2,-avx512vl", False), ("icelake-server", "+avx512f,+avx512vl", True)])
def test_full_width_is_avx512_but_on_zen4(monkeypatch, name, features, full):
    """Sixteen-lane loops where the target has AVX-512 and runs a ``zmm`` instruction
    whole: not on Zen 4 (two 256-bit halves), nor without AVX-512."""
    from dualgraph.kernels import isa
    monkeypatch.setattr(isa, "target", lambda: (name, features))
    assert isa.full_width() is full
