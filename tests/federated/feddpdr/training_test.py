"""Tests of the compiled program (federated.feddpdr.training, stages, keys)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import clipping
from federated import aggregation, feddpdr, partition
from federated.feddpdr import training
from mechanisms.erm import objective_perturbation as op
from mechanisms.pca import dp_pca
from tests.federated import layouts
from tests.federated.feddpdr.problems import blobs


@pytest.mark.slow
def test_vmapped_padded_pipeline_equals_per_participant_loop():
  d, k, classes = 6, 2, 3
  config = feddpdr.Config(mechanism="feddpdr", epsilon=1.0, k=k)
  sizes = (30, 45, 60)
  x, labels = blobs(sum(sizes), d, classes, 0)
  bounds = np.cumsum((0,) + sizes)
  xs = [x[bounds[i]:bounds[i + 1]] for i in range(3)]
  ys = [labels[bounds[i]:bounds[i + 1]] for i in range(3)]
  parts = partition.pad(xs, ys)
  # Extra padding holding garbage must change nothing.
  n_max = 80
  xp = np.full((3, n_max, d), 0.9, np.float32)
  yp = np.full((3, n_max), 2, np.int64)
  xp[:, :60], yp[:, :60] = parts.x, parts.y
  mask = np.zeros((3, n_max), np.float32)
  mask[:, :60] = parts.mask
  plan = feddpdr.make_plan(parts.sizes, dim=d, num_classes=classes,
                         config=config)
  key = jax.random.key(5)
  with jax.enable_x64(True):
    out = jax.jit(lambda kk: training._train_one(
        kk, feddpdr.Rows(jnp.asarray(xp), jnp.asarray(yp),
                         jnp.asarray(mask)),
        feddpdr.Traced(jnp.asarray(plan.sigma, jnp.float32),
                       jnp.asarray(plan.sizes), jnp.asarray(plan.p),
                       jnp.asarray(plan.theta), jnp.asarray(plan.epsilon_gap)),
        config=config,
        num_classes=classes))(key)
    # The same computation, one participant at a time, unpadded.
    # Participant i's keys: split(fold_in(key, i)) (independent of P).
    pairs = [jax.random.split(jax.random.fold_in(key, i)) for i in range(3)]
    pca_keys = [pair[0] for pair in pairs]
    fit_keys = [pair[1] for pair in pairs]
    bases = jnp.stack([
        dp_pca.noisy_basis(pca_keys[i], jnp.asarray(xs[i]),
                           jnp.ones(sizes[i]), k=k,
                           sigma=float(plan.sigma[i])).components
        for i in range(3)])
    weights = aggregation.size_weights(np.array(sizes))
    basis = aggregation.subspace_aggregate(bases, weights)
    fit = jax.jit(lambda kk, z, y, n, p, t, g: op.one_vs_rest(
        kk, z, y, jnp.ones(z.shape[0]), num_classes=classes,
        num_examples=n, p=p, theta=t, epsilon_gap=g, lam=config.lam))
    betas = []
    for i in range(3):
      z = clipping.clip_rows((jnp.asarray(xs[i]) @ basis).astype(jnp.float64))
      res = fit(fit_keys[i], z, jnp.asarray(ys[i]), plan.sizes[i], plan.p[i],
                plan.theta[i], plan.epsilon_gap[i])
      assert bool(jnp.all(res.converged))
      betas.append(res.beta)
    global_beta = aggregation.model_aggregate(jnp.stack(betas), weights)
  out, basis, global_beta = jax.device_get((out, basis, global_beta))
  np.testing.assert_allclose(np.abs(out.global_basis.T @ basis),
                             np.eye(k), atol=1e-4)
  # Same basis up to column signs; a sign flip of column j flips β[:, j].
  signs = np.sign(np.diag(out.global_basis.T @ basis))
  np.testing.assert_allclose(out.global_betas * signs, global_beta,
                             atol=1e-4)
  assert bool(np.all(out.converged))


def test_budgets_share_one_compiled_program(monkeypatch):
  # ε, δ and the calibration reach the program only as traced σ, p, θ:
  # runs at three budgets (and both calibrations) trace _train_one once,
  # and so does the non-private baseline (the same program, noise off).
  x, labels = blobs(200, 6, 3, 3)
  parts = partition.partition(jax.random.key(0), x[:150], labels[:150],
                              sizes=(70, 80))
  traces = []
  original = training._train_one

  def counted(*args, **kwargs):
    traces.append(kwargs["config"].mechanism)
    return original(*args, **kwargs)

  monkeypatch.setattr(training, "_train_one", counted)
  training._train_all.clear_cache()
  for eps, calibration in ((0.5, "analytic"), (4.0, "analytic"),
                           (0.9, "classic")):
    config = feddpdr.Config(epsilon=eps, k=2, lam=1.0,
                            calibration=calibration)
    feddpdr.run(jax.random.key(1), parts, x[150:], labels[150:],
                num_classes=3, config=config)
  assert traces == ["feddpdr"]
  feddpdr.run(jax.random.key(1), parts, x[150:], labels[150:],
              num_classes=3, config=feddpdr.Config(mechanism="nonpriv",
                                                   k=2, lam=1.0))
  assert traces == ["feddpdr"]
  # The traced budget is used: the same key at two budgets gives two
  # different models (the noise is scaled by the traced σ and p).
  betas = []
  for eps in (0.5, 50.0):
    config = feddpdr.Config(epsilon=eps, k=2, lam=1.0)
    plan = feddpdr.make_plan(parts.sizes, dim=6, num_classes=3, config=config)
    with jax.enable_x64(True):
      args = feddpdr.train_arguments(jax.random.key(1), parts, plan,
                                     seeds=1)
      betas.append(np.asarray(feddpdr.train(
          *args, config=config, num_classes=3).global_betas))
  assert traces == ["feddpdr"]
  assert np.max(np.abs(betas[0] - betas[1])) > 0.1


def test_participant_keys_do_not_depend_on_the_number_of_participants():
  key = jax.random.key(9)
  pca3, fit3 = feddpdr.participant_keys(key, 3)
  pca5, fit5 = feddpdr.participant_keys(key, 5)
  data = jax.random.key_data
  np.testing.assert_array_equal(data(pca3), data(pca5)[:3])
  np.testing.assert_array_equal(data(fit3), data(fit5)[:3])
  # A process holding participants 3 and 4 derives the same keys.
  pca_tail, fit_tail = feddpdr.participant_keys(key, 2, first=3)
  np.testing.assert_array_equal(data(pca_tail), data(pca5)[3:])
  np.testing.assert_array_equal(data(fit_tail), data(fit5)[3:])
  # All keys distinct: no participant reuses another's noise, and the
  # server's post-processing key is none of them.
  server = data(feddpdr.server_key(key)).reshape(1, -1)
  flat = np.concatenate([data(pca5), data(fit5)]).reshape(10, -1)
  flat = np.concatenate([flat, server])
  assert len({tuple(r) for r in flat}) == 11


@pytest.mark.slow  # heavy for the default suite (CI time)
def test_nonpriv_is_the_private_program_with_the_noise_off():
  # The baseline runs the feddpdr program with σ = 0, θ = 0 and p = ∞. It
  # must equal the explicitly non-private kernels (exact PCA, fits with
  # b = 0 and θ = 0) computed here participant by participant.
  d, k, classes = 6, 2, 3
  config = feddpdr.Config(mechanism="nonpriv", k=k)
  sizes = (40, 55)
  x, labels = blobs(sum(sizes), d, classes, 7)
  xs, ys = np.split(x, [sizes[0]]), np.split(labels, [sizes[0]])
  parts = partition.pad(xs, ys)
  plan = feddpdr.make_plan(parts.sizes, dim=d, num_classes=classes,
                         config=config)
  assert np.all(plan.sigma == 0) and np.all(plan.theta == 0)
  assert np.all(np.isinf(plan.p))
  with jax.enable_x64(True):
    args = feddpdr.train_arguments(jax.random.key(4), parts, plan, seeds=1)
    out = jax.device_get(feddpdr.train(*args, config=config,
                                       num_classes=classes))
    bases = jnp.stack([dp_pca.pca(jnp.asarray(xi), jnp.ones(len(xi)),
                                  k=k).components for xi in xs])
    weights = aggregation.size_weights(np.array(sizes))
    basis = aggregation.subspace_aggregate(bases, weights)

    @jax.jit  # one compile per participant's row count (eager: ~150)
    def fit(xi, yi):
      z = clipping.clip_rows((xi @ basis).astype(jnp.float64))
      return op.one_vs_rest(jax.random.key(0), z, yi, jnp.ones(len(xi)),
                            num_classes=classes,
                            num_examples=float(len(xi)), p=1.0, theta=0.0,
                            lam=config.lam, private=False).beta

    betas = [fit(jnp.asarray(xi), jnp.asarray(yi))
             for xi, yi in zip(xs, ys, strict=True)]
    global_beta = aggregation.model_aggregate(jnp.stack(betas), weights)
  assert bool(np.all(out.converged))
  # float32 PCA of the same matrices (only padding differs), float64 fits
  # to ‖∇J‖ ≤ 1e-8 with λ = 0.01: 1e-5 is far above their rounding and far
  # below any noise (b ≠ 0 would move β by ~‖b‖/n ≥ 1e-2 here).
  np.testing.assert_allclose(out.bases[0], bases, atol=1e-5)
  np.testing.assert_allclose(out.global_basis[0], basis, atol=1e-5)
  np.testing.assert_allclose(out.global_betas[0], global_beta, atol=1e-5)


@pytest.mark.slow
def test_subspace_topk_agrees_with_eigh_in_the_pipeline():
  # topk="subspace" changes only how each top-k is found: on the
  # well-gapped layout problem with the noise off, every basis, model and
  # test score agrees with exact eigh within layouts' tolerances (derived
  # there from the gaps, which assert_same_runs checks first). Subspace
  # iteration converges like (λ_{p+1}/λ_k)^16 with p = 2k + 8 = 14, far
  # below those tolerances on these spectra.
  parts, x_test, _ = layouts.problem(4)
  runs = {}
  for topk in ("eigh", "subspace"):
    cfg = dataclasses.replace(layouts.config("nonpriv"), topk=topk)
    plan = feddpdr.make_plan(parts.sizes, dim=layouts.D,
                           num_classes=layouts.NUM_CLASSES, config=cfg)
    with jax.enable_x64(True):
      args = feddpdr.train_arguments(jax.random.key(2), parts, plan,
                                     seeds=1)
      out = jax.device_get(feddpdr.train(
          *args, config=cfg, num_classes=layouts.NUM_CLASSES))
    runs[topk] = {f: np.asarray(v) for f, v in out._asdict().items()}
    runs[topk]["sigma"] = np.asarray(plan.sigma)
  layouts.assert_same_runs(runs["subspace"], runs["eigh"], parts, x_test,
                           mechanism="nonpriv")
