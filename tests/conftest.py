"""Global test settings: JAX runs on the CPU, x64 is left to each test.

Float32 matrix products run at full precision on every platform
(``JAX_DEFAULT_MATMUL_PRECISION=highest``): the tests compare with float64
references at float32 tolerances, and on a GPU JAX's default computes a
float32 product from TensorFloat-32 operands (about 10⁻³ relative), which
no such tolerance admits. This does not test the library's own precision:
the products that must be exact whatever the platform's default carry it
in their traced programs (:func:`dpcore.linalg.full_precision`), and
``tests/dpcore/products.py`` reads it there, tracing at the default.

The default selection (``-m 'not slow'``, what CI runs) has XLA compile
its programs with LLVM's optimisation level 0: most of that suite's time
is compiling small programs that then run once, and level 0 compiles
them about a quarter faster. The programs compute the same operations,
so no test's claim depends on it, but the last bits of a float result may
differ from a default build's. Any other selection (``-m slow``), the
scripts and the benchmarks keep XLA's default; a level already in
``XLA_FLAGS`` wins.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")

_LEVEL = "--xla_backend_optimization_level"


def pytest_configure(config):
  # Before any test runs a program (XLA reads XLA_FLAGS when JAX starts
  # its backend), in the main process and in every xdist worker alike.
  flags = os.environ.get("XLA_FLAGS", "")
  if config.getoption("markexpr") == "not slow" and _LEVEL not in flags:
    os.environ["XLA_FLAGS"] = " ".join(filter(None, [flags, f"{_LEVEL}=0"]))
