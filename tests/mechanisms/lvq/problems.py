"""Shared problems of the G(M)LVQ tests: random rows, prototypes and Ω,
a plan's ledger, and a jit that counts its traces."""

import jax
import jax.numpy as jnp

from dpcore import accounting
from mechanisms.lvq import init as lvq_init

N, D, K = 40, 6, 3
MODELS = [("glvq", None), ("gmlvq", None), ("gmlvq", 2)]


def problem(seed, *, model="glvq", rank=None, dtype=jnp.float32, m_per=2):
  """(params, x, y, prototype labels): N rows in [−1, 1]^D of K classes."""
  kx, ky, kw, ko = jax.random.split(jax.random.key(seed), 4)
  x = jax.random.uniform(kx, (N, D), dtype, -1.0, 1.0)
  y = jax.random.randint(ky, (N,), 0, K)
  labels = lvq_init.prototype_labels(K, m_per)
  params = {"prototypes": jax.random.uniform(kw, (K * m_per, D), dtype,
                                             -0.8, 0.8)}
  if model == "gmlvq":
    params["omega"] = jax.random.normal(ko, (rank or D, D), dtype)
  return params, x, y, labels


def ledger_of(plan):
  """A ledger holding ``plan``'s releases."""
  book = accounting.PrivacyLedger()
  plan.record(book)
  return book


def trace_count(fn):
  """``fn`` jitted, and the list of its traces so far."""
  traces = []

  def counted(*args):
    traces.append(1)
    return fn(*args)
  return jax.jit(counted), traces
