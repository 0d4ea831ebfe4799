"""Global test settings: JAX runs on the CPU, x64 is left to each test."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
