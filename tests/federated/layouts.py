"""One FedDPDR problem trained under different layouts, and what to compare.

Chunked, sharded and all-at-once runs of the same computation differ only
in how XLA batches the float32 products, so they agree up to rounding
wherever the result is a well-conditioned function of its input, and may
legitimately differ wherever it is not (an eigenvector whose eigenvalue has
a near-equal neighbour, a prediction on the decision boundary). The
problem below is built so that every quantity compared is well-conditioned,
and :func:`assert_same_runs` checks that premise before it compares:

* three class directions with unequal class shares (0.55, 0.3, 0.15), so
  each participant's top-3 eigenvalues of XᵀX are apart from each other
  and from the rest, by more than the DP noise can move them (Weyl's
  inequality with ‖E‖₂ ≤ 3σ√d);
* ε large enough that the noise is small beside those gaps, but not zero:
  each participant's noise and fits still come from its own key, so a key
  or mask that lands on the wrong participant changes its basis and model
  far beyond the tolerances.

Tolerances. Inputs are float32 (unit roundoff u = 2⁻²⁴ ≈ 6e-8) and the
d × d products sum ≤ 150 rows of norm ≤ 1, so a layout changes XᵀX by at
most about 150·d·u ≈ 2e-4 in any entry (far less in practice). An
eigenvector then moves by at most ‖ΔM‖₂/gap (Davis–Kahan), < 1e-4 for the
gaps checked here (≥ 2). The fits are float64 to ‖∇J‖ ≤ 1e-8 with strong
convexity λ = 0.01, so a model moves by its input's change times a
condition factor of order 1/λ = 100. Hence :data:`BASIS_TOL` = 1e-3 for
bases and projectors and :data:`MODEL_TOL` = 1e-2 for models and decision
scores: each 10× the bound above. Measured between the chunked and the
whole run: bases 3.9e-7, global basis 5e-5, models 2.5e-4. With a key or a
mask deliberately shifted by one chunk (sharding_test's slow mutation
test) the largest differences were 0.04–0.07 in local bases, 0.79–0.83 in
the global basis and 4.0–4.5 in models: every one far above the
tolerances. The participants are fixed blocks of NumPy-generated rows, so
the spectra checked below are the same under every JAX PRNG setting.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from functools import partial

import jax
import numpy as np

from federated import aggregation, feddpdr, partition, sharding
from mechanisms.pca import dp_pca

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def run_on_devices(script: str, devices: int, out_path,
                   timeout: int = 1800) -> dict:
  """Runs ``script`` in a fresh process on ``devices`` forced host devices.

  The script gets ``OUT`` (``out_path``) and must ``np.savez`` its
  results there; they are returned as a dict.
  """
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO,
         "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
  script = textwrap.dedent(f"""
      import jax
      assert len(jax.devices()) == {devices}, jax.devices()
      OUT = {str(out_path)!r}
  """) + textwrap.dedent(script)
  proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=timeout)
  assert proc.returncode == 0, proc.stderr[-3000:]
  with np.load(out_path) as data:
    return dict(data)

D = 20
K = 3
NUM_CLASSES = 3
SIZES = (150, 120, 130, 110, 100, 140)
BASIS_TOL = 1e-3
MODEL_TOL = 1e-2


def problem(num_participants: int = 6):
  """(participants, x_test, y_test) with well-separated spectra."""
  rng = np.random.default_rng(0)
  centres = np.linalg.qr(rng.normal(size=(D, K)))[0].T
  sizes = list(SIZES[:num_participants])
  total = sum(sizes) + 200
  labels = rng.choice(NUM_CLASSES, size=total, p=[0.55, 0.3, 0.15])
  x = centres[labels] + 0.1 * rng.normal(size=(total, D))
  x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
  # Consecutive blocks of the (already random) rows: the participants do
  # not depend on JAX's PRNG implementation, only the noise does.
  n = sum(sizes)
  cuts = np.cumsum(sizes)[:-1]
  parts = partition.pad(np.split(x[:n], cuts), np.split(labels[:n], cuts))
  return parts, x[n:], labels[n:]


def config(mechanism: str) -> feddpdr.Config:
  return feddpdr.Config(mechanism=mechanism, epsilon=100.0, k=K)


def train(parts, mechanism: str, *, seeds: int = 2, mesh=None,
          chunk=None, aggregation: str = "subspace") -> dict:
  """The per-seed outputs of :func:`feddpdr.train`, as NumPy arrays."""
  cfg = dataclasses.replace(config(mechanism), aggregation=aggregation)
  plan = feddpdr.make_plan(parts.sizes, dim=D, num_classes=NUM_CLASSES,
                         config=cfg)
  program = feddpdr.program(cfg)
  with jax.enable_x64(True):
    args = feddpdr.train_arguments(jax.random.key(2), parts, plan,
                                   seeds=seeds, mesh=mesh)
    out = jax.jit(partial(feddpdr.train, config=program,
                          num_classes=NUM_CLASSES, mesh=mesh,
                          chunk=chunk))(*args)
    out = jax.device_get(out)
  result = {name: np.asarray(value) for name, value in out._asdict().items()}
  result["sigma"] = np.asarray(plan.sigma)
  return result


def pca_and_aggregate(mesh):
  """DP-PCA of 6 participants and their subspace aggregate, vmapped over 2
  repeats as :func:`feddpdr.train` does, on ``mesh`` (or one device)."""
  parts, _, _ = problem(6)
  weights = aggregation.size_weights(parts.sizes)
  each = sharding.over_participants(
      lambda k, x, m: dp_pca.noisy_basis(k, x, m, k=K, sigma=0.3).components,
      mesh)

  def one(keys, x, mask):
    bases = each(keys, x, mask)
    return bases, aggregation.subspace_aggregate(bases, weights)

  keys = jax.random.split(jax.random.key(2), (2, 6))
  return jax.jit(jax.vmap(one, in_axes=(0, None, None)))(
      keys, sharding.place(parts.x, mesh), sharding.place(parts.mask, mesh))


def _check_premise(parts, sigma) -> None:
  """Every participant's top K+1 noisy eigenvalues are apart (Weyl)."""
  x, mask = np.asarray(parts.x, np.float64), np.asarray(parts.mask)
  for i in range(x.shape[0]):
    rows = x[i][mask[i] > 0]
    values = np.linalg.eigvalsh(rows.T @ rows)[::-1][:K + 1]
    noise = 3.0 * sigma[i] * np.sqrt(D)
    gap = np.min(-np.diff(values)) - 2 * noise
    assert gap >= 2.0, (i, values, noise)


def _check_aggregate_premise(bases, sizes) -> None:
  """The aggregate's top K+1 singular values are apart."""
  w = np.asarray(sizes, np.float64) / np.sum(sizes)
  stacked = np.concatenate(
      [np.sqrt(wi) * b for wi, b in zip(w, bases, strict=True)], axis=1)
  s = np.linalg.svd(stacked, compute_uv=False)[:K + 1] ** 2
  assert np.min(-np.diff(s)) >= 1e-3, s


def _projectors(bases):
  return np.einsum("...ik,...jk->...ij", bases, bases)


def _scores(basis, betas, x_test):
  z = x_test.astype(np.float64) @ basis if basis is not None else x_test
  return z @ np.swapaxes(betas, -1, -2)


def assert_same_runs(got: dict, want: dict, parts, x_test, *,
                     mechanism: str) -> None:
  """Asserts two layouts of one run agree on everything well-defined."""
  _check_premise(parts, want["sigma"])
  assert np.max(got["grad_norm"]) <= 1e-8
  assert np.max(want["grad_norm"]) <= 1e-8
  if mechanism in ("feddpdr", "dpdr_dpml", "nonpriv"):
    np.testing.assert_allclose(_projectors(got["bases"]),
                               _projectors(want["bases"]), atol=BASIS_TOL,
                               err_msg=f"{mechanism}: subspaces")
    np.testing.assert_allclose(got["bases"], want["bases"], atol=BASIS_TOL,
                               err_msg=f"{mechanism}: bases")
  np.testing.assert_allclose(got["betas"], want["betas"], atol=MODEL_TOL,
                             err_msg=f"{mechanism}: local models")
  if mechanism in ("feddpdr", "nonpriv"):
    for seed_bases in want["bases"]:
      _check_aggregate_premise(seed_bases, parts.sizes)
    np.testing.assert_allclose(got["global_basis"], want["global_basis"],
                               atol=BASIS_TOL,
                               err_msg=f"{mechanism}: global basis")
    np.testing.assert_allclose(got["global_betas"], want["global_betas"],
                               atol=MODEL_TOL,
                               err_msg=f"{mechanism}: global model")
    np.testing.assert_allclose(
        _scores(got["global_basis"], got["global_betas"], x_test),
        _scores(want["global_basis"], want["global_betas"], x_test),
        atol=MODEL_TOL, err_msg=f"{mechanism}: test scores")
  elif mechanism == "dpdr_dpml":
    for s in range(want["bases"].shape[0]):
      for i in range(want["bases"].shape[1]):
        np.testing.assert_allclose(
            _scores(got["bases"][s, i], got["betas"][s, i], x_test),
            _scores(want["bases"][s, i], want["betas"][s, i], x_test),
            atol=MODEL_TOL, err_msg=f"{mechanism}: participant {i} scores")
