"""The CPU the loops are compiled for, as Numba will compile them: its name, its features
how many vector registers a loop's eight-lane sums may keep, and whether sixteen-lane ones
pay (:func:`full_width`).

Numba compiles for the host unless ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` say
otherwise (``numba.core.config``; ``NUMBA_ENABLE_AVX=0`` drops the host's AVX features),
and the choices by CPU features (a register block of 24 sums needs AVX-512's 32 vector
registers) must follow what the code will run as, not what the host could run: an AVX2
host and this machine with ``NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=""`` then choose
the same loops. (``NUMBA_CPU_NAME`` alone is no emulation: Numba then adds the host's
features to the name, AVX-512 included.)

:func:`target` reads the variables as Numba's config does (without importing Numba, which
the native loops' loading path avoids; ``tests/test_isa.py`` checks it against Numba's own
codegen). Where the features name ``avx512vl`` (Numba passes the host's whole list,
every feature ``+`` or ``-``) that decides; where they do not (a CPU name with no or a
partial feature list) LLVM's view of the name decides, read off the assembly of a probe:
a 64-bit arithmetic shift of a ``<4 x i64>`` is one ``ymm`` instruction only with
AVX-512VL, whose EVEX encoding is also what gives 256-bit code the registers 16-31.
"""
from __future__ import annotations

import os
from functools import lru_cache

# CPUs whose AVX Numba turns off by default (numba.core.config's ENABLE_AVX)
_NO_AVX = {"corei7-avx", "core-avx-i", "sandybridge", "ivybridge", "nocona"}
_PROBE = """
define <4 x i64> @probe(<4 x i64> %a) {
  %r = ashr <4 x i64> %a, <i64 3, i64 3, i64 3, i64 3>
  ret <4 x i64> %r
}
"""


def target() -> tuple[str, str]:
    """``(cpu name, features)`` Numba's JIT compiles for (features as LLVM's ``+a,-b``
    list, or ``""``: the name's own), from the environment as Numba reads it."""
    env = os.environ.get
    return _target(env("NUMBA_CPU_NAME"), env("NUMBA_CPU_FEATURES"), env("NUMBA_ENABLE_AVX"))


@lru_cache(maxsize=None)
def _target(name, features, enable_avx) -> tuple[str, str]:
    """:func:`target` for these values of the variables (worked out once: joining the
    host's few hundred features took ~100 us at every eager call that asks)."""
    if features is None and str(name).lower() == "generic":
        features = ""
    host, host_features = _host()
    if features is None:
        avx = _avx_enabled(name or host, enable_avx)
        features = ",".join(f if avx or not f[1:].startswith("avx") else "-" + f[1:]
                            for f in host_features.split(","))
    return name or host, features


@lru_cache(maxsize=None)
def _host() -> tuple[str, str]:
    """LLVM's name and feature list of the host CPU (asked once: a few hundred us)."""
    import llvmlite.binding as llvm
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def _avx_enabled(name: str, value: str | None) -> bool:
    """Numba's ``ENABLE_AVX``: ``value`` (``NUMBA_ENABLE_AVX``) where set, else on but for
    a few CPU names."""
    if value is not None:
        try:
            return bool(int(value))
        except ValueError:
            pass
    return name not in _NO_AVX


def vector_registers() -> int:
    """How many ``ymm`` registers the compiled loops may use: 32 with AVX-512VL, else 16
    (a register block of 24 sums needs 32)."""
    return _registers(*target())


# CPUs with AVX-512 whose vector units are 256 bits wide: a ``zmm`` instruction runs as two
# halves, so sixteen-lane loops do the eight-lane ones' work in as many cycles
_HALF_WIDTH = {"znver4"}


def full_width() -> bool:
    """Whether the compiled loops have AVX-512 (:func:`vector_registers` 32) on a CPU that
    runs a sixteen-lane vector as one operation: not AMD's Zen 4 (``znver4``), whose loops
    keep eight lanes."""
    name, features = target()
    return _registers(name, features) >= 32 and name not in _HALF_WIDTH


@lru_cache(maxsize=None)
def _registers(name: str, features: str) -> int:
    flags = {f[1:]: f[0] == "+" for f in features.split(",") if f[:1] in "+-" and f[1:]}
    if "avx512vl" in flags:
        return 32 if flags["avx512vl"] and flags.get("avx512f", True) else 16
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_default_triple().create_target_machine(cpu=name,
                                                                      features=features)
    asm = machine.emit_assembly(llvm.parse_assembly(_PROBE))
    one = any("vpsraq" in line and "ymm" in line for line in asm.splitlines())
    return 32 if one else 16
