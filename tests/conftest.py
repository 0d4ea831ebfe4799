"""Global test settings: JAX runs on the CPU, x64 is left to each test.

XLA compiles the tests' programs with LLVM's optimisation level 0. Most
of the suite's time is compiling small programs that then run once, and
level 0 compiles them about a quarter faster; the programs compute the
same operations, so no test's claim depends on it, but the last bits of
a float result may differ from a default build's. Benchmarks and the
scripts keep XLA's default. A flag already in ``XLA_FLAGS`` wins.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = " ".join(filter(None, [
      os.environ.get("XLA_FLAGS"), "--xla_backend_optimization_level=0"]))
