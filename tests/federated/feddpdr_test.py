"""Tests of the FedDPDR-DPML pipeline (federated.feddpdr)."""

import dataclasses
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import pld, rdp

from dpcore import accounting, clipping, memory, options, shape
from federated import aggregation, feddpdr, partition
from federated.feddpdr import training
from mechanisms.erm import objective_perturbation as op
from mechanisms.pca import dp_pca
from tests.federated import layouts
from tests.pinned import accounted


def _blobs(n, d, classes, seed):
  """Unit rows around well separated class directions."""
  rng = np.random.default_rng(seed)
  centres = np.linalg.qr(rng.normal(size=(d, classes)))[0].T
  labels = rng.integers(0, classes, n)
  x = centres[labels] + 0.15 * rng.normal(size=(n, d))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return x.astype(np.float32), labels


@pytest.mark.parametrize("budget_per_classifier", [False, True])
def test_privacy_matches_independent_dp_accounting(budget_per_classifier):
  config = feddpdr.Config(epsilon=0.5, delta=1e-4,
                          budget_per_classifier=budget_per_classifier)
  plan = feddpdr.make_plan(np.array([1000, 2000]), d=30, num_classes=10,
                         config=config)
  eps1 = eps2 = 0.25
  per_fit = eps2 if budget_per_classifier else eps2 / 10
  assert plan.epsilon_pca == eps1
  assert plan.epsilon_fit == pytest.approx(per_fit)
  # Gaussian step alone (sensitivity √2 under replace-one, the default):
  # dp_accounting's PLD says the analytic σ spends ε₁.
  acc = pld.PLDAccountant(value_discretization_interval=1e-5)
  acc.compose(dp_accounting.GaussianDpEvent(plan.sigma[0] / math.sqrt(2)))
  np.testing.assert_allclose(acc.get_epsilon(1e-4), eps1, rtol=1e-2)
  # Basic composition: ε₁ + K·(per-fit ε).
  basic = eps1 + 10 * per_fit
  np.testing.assert_allclose(plan.privacy["epsilon_basic"], basic,
                             rtol=1e-6)
  # RDP composition computed here directly with dp_accounting
  # (ε-DP ⇒ ε²/2-zCDP, Bun & Steinke 2016).
  r = rdp.RdpAccountant()
  r.compose(dp_accounting.GaussianDpEvent(plan.sigma[0] / math.sqrt(2)))
  r.compose(dp_accounting.ZCDpEvent(per_fit**2 / 2), 10)
  expected = min(basic, r.get_epsilon(1e-4))
  np.testing.assert_allclose(plan.privacy["epsilon"], expected, rtol=1e-6)
  assert plan.privacy["delta"] == 1e-4
  assert plan.privacy["epsilon_nominal"] == 0.5
  if budget_per_classifier:
    assert plan.privacy["epsilon"] > 2.0  # ≈ K·ε₂, far above nominal 0.5


def test_add_remove_calibration_is_accounted_under_replace_one():
  # The paper calibrates DP-PCA for sensitivity 1 (add/remove); the run is
  # accounted under replace-one (√2), so the reported ε exceeds nominal.
  sizes = np.array([500, 500])
  paper = feddpdr.make_plan(sizes, d=30, num_classes=10, config=feddpdr.Config(
      epsilon=0.5, neighbouring="add_remove"))
  ours = feddpdr.make_plan(sizes, d=30, num_classes=10, config=feddpdr.Config(
      epsilon=0.5))
  np.testing.assert_allclose(ours.sigma[0], math.sqrt(2) * paper.sigma[0],
                             rtol=1e-9)
  assert paper.privacy["epsilon"] > ours.privacy["epsilon"]
  r = rdp.RdpAccountant()
  r.compose(dp_accounting.GaussianDpEvent(paper.sigma[0] / math.sqrt(2)))
  r.compose(dp_accounting.ZCDpEvent(0.025**2 / 2), 10)
  np.testing.assert_allclose(paper.privacy["epsilon"],
                             min(paper.privacy["epsilon_basic"],
                                 r.get_epsilon(1e-4)), rtol=1e-6)


def test_paper_calibration_and_other_mechanisms_budget():
  sizes = np.array([500, 500])
  classic = feddpdr.make_plan(
      sizes, d=30, num_classes=10, config=feddpdr.Config(
          epsilon=0.5, calibration="classic", neighbouring="add_remove"))
  np.testing.assert_allclose(classic.sigma[0], math.sqrt(
      2 * math.log(1.25 / 1e-4)) / 0.25)
  dpml = feddpdr.make_plan(sizes, d=30, num_classes=10,
                         config=feddpdr.Config(mechanism="dpml",
                                               epsilon=0.5))
  assert dpml.epsilon_pca is None and dpml.epsilon_fit == pytest.approx(0.05)
  np.testing.assert_allclose(dpml.privacy["epsilon"], 0.5, rtol=1e-6)
  nonpriv = feddpdr.make_plan(sizes, d=30, num_classes=10,
                            config=feddpdr.Config(mechanism="nonpriv"))
  assert nonpriv.privacy == accounting.no_guarantee_record(
      accounting.NON_PRIVATE)
  assert nonpriv.epsilon_fit is None and not np.any(nonpriv.sigma)
  with pytest.raises(ValueError, match="classic"):
    feddpdr.make_plan(sizes, d=30, num_classes=10, config=feddpdr.Config(
        epsilon=2.0, calibration="classic"))
  # p and θ use each participant's own n.
  uneven = feddpdr.make_plan(np.array([100, 10_000]), d=30, num_classes=10,
                           config=feddpdr.Config(epsilon=0.5))
  assert uneven.theta[0] > uneven.theta[1]


@pytest.mark.slow
def test_vmapped_padded_pipeline_equals_per_participant_loop():
  d, k, classes = 6, 2, 3
  config = feddpdr.Config(mechanism="feddpdr", epsilon=1.0, k=k)
  sizes = (30, 45, 60)
  x, labels = _blobs(sum(sizes), d, classes, 0)
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
  plan = feddpdr.make_plan(parts.sizes, d=d, num_classes=classes,
                         config=config)
  key = jax.random.key(5)
  with jax.enable_x64(True):
    out = jax.jit(lambda kk: training._train_one(
        kk, feddpdr.Rows(jnp.asarray(xp), jnp.asarray(yp),
                         jnp.asarray(mask)),
        feddpdr.Traced(jnp.asarray(plan.sigma, jnp.float32),
                       jnp.asarray(plan.n), jnp.asarray(plan.p),
                       jnp.asarray(plan.theta)), config=config,
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
    fit = jax.jit(lambda kk, z, y, n, p, t: op.one_vs_rest(
        kk, z, y, jnp.ones(z.shape[0]), num_classes=classes, n=n, p=p,
        theta=t, lam=config.lam))
    betas = []
    for i in range(3):
      z = clipping.clip_rows((jnp.asarray(xs[i]) @ basis).astype(jnp.float64))
      res = fit(fit_keys[i], z, jnp.asarray(ys[i]), plan.n[i], plan.p[i],
                plan.theta[i])
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


def test_run_end_to_end_and_convergence_error():
  x, labels = _blobs(400, 8, 3, 1)
  parts = partition.partition(jax.random.key(0), x[:300], labels[:300],
                              sizes=(100, 120, 80))
  config = feddpdr.Config(mechanism="nonpriv", k=3)
  result = feddpdr.run(jax.random.key(1), parts, x[300:], labels[300:],
                       num_classes=3, config=config, seeds=2)
  assert isinstance(result, feddpdr.Summary)
  assert result.accuracy > 0.9  # well separated blobs
  assert result.grad_norm_max <= config.tol
  assert len(result.accuracy_per_seed) == result.seeds == 2
  assert result.privacy["no_guarantee"] == accounting.NON_PRIVATE
  assert result.accuracy_per_participant is None  # a federated mechanism
  assert result.iterations_max >= 1 and result.sigma_pca == 0.0
  assert result.accuracy_std >= 0.0
  assert not hasattr(result, "seconds")  # timing is the harness's
  with pytest.raises(feddpdr.ConvergenceError, match="max_iter"):
    feddpdr.run(jax.random.key(1), parts, x[300:], labels[300:],
                num_classes=3, config=dataclasses.replace(config, max_iter=1))


@pytest.mark.parametrize("bad, match", [
    ("epsilon", "epsilon"),
    ("delta", "delta"),
    ("k", "exceeds the data dimension"),
    ("empty", "no rows"),
    ("labels", "outside the class set"),
    ("nan", "NaN"),
    ("norm", "norm"),
    ("mechanism", "mechanism"),
])
def test_run_rejects_bad_input(bad, match):
  x, labels = _blobs(60, 5, 3, 2)
  parts = partition.partition(jax.random.key(0), x[:40], labels[:40],
                              sizes=(20, 20))
  x_test, y_test = x[40:].copy(), labels[40:].copy()
  config = feddpdr.Config(k=2)
  if bad == "epsilon":
    config = dataclasses.replace(config, epsilon=-1.0)
  elif bad == "delta":
    config = dataclasses.replace(config, delta=1.5)
  elif bad == "k":
    config = dataclasses.replace(config, k=6)
  elif bad == "empty":
    parts = parts._replace(sizes=np.array([20, 0]),
                           mask=parts.mask * np.array([[1.0], [0.0]]))
  elif bad == "labels":
    y_test[0] = 7
  elif bad == "nan":
    x_test[1, 1] = np.nan
  elif bad == "norm":
    parts.x[0, 0] *= 3.0
  else:
    config = dataclasses.replace(config, mechanism="fedavg")
  with pytest.raises(ValueError, match=match):
    feddpdr.run(jax.random.key(1), parts, x_test, y_test, num_classes=3,
                config=config)


def test_budgets_share_one_compiled_program(monkeypatch):
  # ε, δ and the calibration reach the program only as traced σ, p, θ:
  # runs at three budgets (and both calibrations) trace _train_one once,
  # and so does the non-private baseline (the same program, noise off).
  x, labels = _blobs(200, 6, 3, 3)
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
    plan = feddpdr.make_plan(parts.sizes, d=6, num_classes=3, config=config)
    with jax.enable_x64(True):
      args = feddpdr.train_arguments(jax.random.key(1), parts, plan,
                                     seeds=1)
      betas.append(np.asarray(feddpdr.train(
          *args, config=config, num_classes=3).global_betas))
  assert traces == ["feddpdr"]
  assert np.max(np.abs(betas[0] - betas[1])) > 0.1


def test_static_part_excludes_the_budget():
  a = feddpdr.Config(epsilon=0.1, delta=1e-5, calibration="classic",
                     neighbouring="add_remove", budget_per_classifier=True)
  b = feddpdr.Config(epsilon=8.0)
  assert a.static == b.static
  assert hash(a.static) == hash(b.static)
  assert feddpdr.Config(k=3).static != b.static
  assert feddpdr.Config(topk="subspace").static != b.static
  # The baseline selects the private program; other mechanisms their own.
  assert feddpdr.program(feddpdr.Config(mechanism="nonpriv")) == b.static
  assert feddpdr.program(feddpdr.Config(mechanism="dpml")) != b.static


def test_config_rejects_an_unknown_topk():
  feddpdr.Config(topk="subspace").check(d=30)
  with pytest.raises(ValueError, match="topk must be one of"):
    feddpdr.Config(topk="lanczos").check(d=30)


def test_config_is_static_plus_the_budget():
  static = [f.name for f in dataclasses.fields(feddpdr.Static)]
  config = [f.name for f in dataclasses.fields(feddpdr.Config)]
  assert config[:len(static)] == static
  assert set(config[len(static):]) == {
      "epsilon", "delta", "calibration", "budget_per_classifier",
      "pca_fraction", "neighbouring"}
  # The program's key is a plain Static: no budget reaches the jit cache.
  assert type(feddpdr.Config(epsilon=3.0).static) is feddpdr.Static
  assert type(feddpdr.program(feddpdr.Config())) is feddpdr.Static


def test_every_mechanism_is_described_once():
  assert tuple(feddpdr.DESCRIPTIONS) == feddpdr.MECHANISMS
  for name, mech in feddpdr.DESCRIPTIONS.items():
    assert mech.name == name and feddpdr.describe(name) is mech
    program = feddpdr.describe(mech.program)
    # A mechanism runs a private program that reduces and aggregates as
    # it does; only the noise (its plan) may differ.
    assert program.program == program.name and program.private
    assert (program.reduces, program.federated) == (mech.reduces,
                                                   mech.federated)
  assert [m for m, d in feddpdr.DESCRIPTIONS.items() if not d.private] == [
      "nonpriv"]
  with pytest.raises(ValueError, match="--sweep_mechanisms must be one of"):
    feddpdr.describe("fedavg", "--sweep_mechanisms")


@pytest.mark.parametrize("change, message", [
    (dict(epsilon=0.0), "^--epsilon must be > 0"),
    (dict(epsilon=2e6), "^--epsilon=2e\\+06 is beyond"),
    (dict(k=40), "^--k=40 exceeds the data dimension d=30; choose --k <= 30"),
    (dict(calibration="classic", epsilon=2.0), "^--calibration=classic is "
     "proven only for ε₁ < 1, and --epsilon=2 gives ε₁ = 1"),
    (dict(neighbouring="swap"), "^--neighbouring must be one of"),
    (dict(mechanism="fedavg"), "^--mechanism must be one of"),
])
def test_settings_are_checked_once_with_the_callers_names(change, message):
  # The launch script hands its flags to these checks (prefix "--").
  config = dataclasses.replace(feddpdr.Config(k=5), **change)
  with pytest.raises(ValueError, match=message):
    feddpdr.check_settings([config], d=30, prefix="--")
  with pytest.raises(ValueError, match=message.replace("--", "")):
    config.check(d=30)


def test_settings_that_pass():
  # dpml never projects (k above d is unused); classic calibration holds
  # for ε₁ < 1 and is not asked of mechanisms without DP-PCA; the old
  # spelling of the relation is accepted.
  feddpdr.check_settings([
      feddpdr.Config(mechanism="dpml", k=40),
      feddpdr.Config(mechanism="dpml", calibration="classic", epsilon=8.0),
      feddpdr.Config(calibration="classic", epsilon=1.9),
      feddpdr.Config(neighbouring="replace"),
      feddpdr.Config(neighbouring="add_remove")], d=30, seeds=2,
      participant_chunk=3)
  assert feddpdr.Config().neighbouring == "replace_one"
  for bad, message in ((dict(seeds=0), "^--seeds"),
                       (dict(participant_chunk=0), "^--participant_chunk")):
    with pytest.raises(ValueError, match=message):
      feddpdr.check_settings([feddpdr.Config()], prefix="--", **bad)


def test_execute_hands_its_training_call_to_the_harness():
  # execute is the one orchestration: a harness's train_with gets the very
  # call execute would make, and what it returns is what gets evaluated.
  x, labels = _blobs(200, 6, 3, 4)
  parts = partition.partition(jax.random.key(0), x[:150], labels[:150],
                              sizes=(70, 80))
  config = feddpdr.Config(mechanism="dpdr_dpml", epsilon=4.0, k=2, lam=1.0)
  kw = dict(num_classes=3, config=config, seeds=2)
  jobs = []

  def train_with(job):
    jobs.append(job)
    return job()

  got = feddpdr.execute(jax.random.key(1), parts, x[150:], labels[150:],
                        train_with=train_with, participant_chunk=1, **kw)
  (job,) = jobs
  assert job.program == feddpdr.program(config) and job.chunk == 1
  assert job.num_classes == 3 and job.mesh is None
  assert got.chunk == 1
  assert got.summary == feddpdr.run(jax.random.key(1), parts, x[150:],
                                    labels[150:], participant_chunk=1, **kw)
  assert len(got.summary.accuracy_per_participant) == 2
  # A memory budget too small even for one participant is refused before
  # any training; one that fits all at once leaves the chunk alone.
  with pytest.raises(ValueError, match="even one at a time"):
    feddpdr.execute(jax.random.key(1), parts, x[150:], labels[150:],
                    memory_budget=1000, train_with=train_with, **kw)
  assert len(jobs) == 1
  assert feddpdr.execute(jax.random.key(1), parts, x[150:], labels[150:],
                         memory_budget=2**40, **kw).chunk is None


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


def test_nonpriv_is_the_private_program_with_the_noise_off():
  # The baseline runs the feddpdr program with σ = 0, θ = 0 and p = ∞. It
  # must equal the explicitly non-private kernels (exact PCA, fits with
  # b = 0 and θ = 0) computed here participant by participant.
  d, k, classes = 6, 2, 3
  config = feddpdr.Config(mechanism="nonpriv", k=k)
  sizes = (40, 55)
  x, labels = _blobs(sum(sizes), d, classes, 7)
  xs, ys = np.split(x, [sizes[0]]), np.split(labels, [sizes[0]])
  parts = partition.pad(xs, ys)
  plan = feddpdr.make_plan(parts.sizes, d=d, num_classes=classes,
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
                            num_classes=classes, n=float(len(xi)), p=1.0,
                            theta=0.0, lam=config.lam, private=False).beta

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
    plan = feddpdr.make_plan(parts.sizes, d=layouts.D,
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


# The privacy record's ε at /tmp/base (before the one shape: prepare and
# participant_ledger) for sizes [1000, 2000], d = 30, K = 10, ε = 0.5,
# δ = 1e-4, k = 5; the plan's record gives the same.
BASE_EPSILON = [
    ({}, 0.38590900133424855),
    ({"mechanism": "dpml"}, 0.5),
    ({"budget_per_classifier": True}, 2.75),
    ({"neighbouring": "add_remove"}, 0.49614018343383637),
    ({"calibration": "classic"}, 0.3046824557805051),
]


@pytest.mark.parametrize("settings, epsilon", BASE_EPSILON)
def test_the_plan_has_the_shape_and_records_as_before(settings, epsilon):
  config = feddpdr.Config(epsilon=0.5, delta=1e-4, k=5, **settings)
  plan = feddpdr.make_plan(np.array([1000, 2000]), d=30, num_classes=10,
                           config=config)
  shape.check_plan(plan)
  shape.check_release(feddpdr.release)
  assert plan.epsilon == accounted(epsilon) and plan.delta == 1e-4
  assert plan.epsilon_nominal == 0.5
  assert plan.relation is options.Relation.REPLACE_ONE
  ledger = accounting.PrivacyLedger()
  plan.record(ledger)
  assert ledger.guarantee(1e-4).epsilon == accounted(epsilon)
  assert plan.privacy["epsilon"] == accounted(epsilon)
  assert ledger.relation is options.Relation.REPLACE_ONE


def test_a_nonprivate_plan_refuses_to_record():
  plan = feddpdr.make_plan(np.array([10, 20]), d=30, num_classes=10,
                           config=feddpdr.Config(mechanism="nonpriv", k=5))
  shape.check_plan(plan)
  assert plan.epsilon is None and plan.delta is None
  with pytest.raises(ValueError, match="no_guarantee_record"):
    plan.record(accounting.PrivacyLedger())


def test_default_budget_is_three_quarters_of_the_memory_available(
    monkeypatch):
  # With no memory_budget the library call plans against MemAvailable, as
  # the scripts do: too little memory is refused before any training.
  x, labels = _blobs(200, 6, 3, 4)
  parts = partition.partition(jax.random.key(0), x[:150], labels[:150],
                              sizes=(70, 80))
  config = feddpdr.Config(mechanism="dpdr_dpml", epsilon=4.0, k=2, lam=1.0)
  jobs = []
  monkeypatch.setattr(memory, "available_bytes", lambda: 1_000)
  with pytest.raises(memory.MemoryBudgetError, match="even one at a time"):
    feddpdr.execute(jax.random.key(1), parts, x[150:], labels[150:],
                    num_classes=3, config=config,
                    train_with=lambda job: jobs.append(job))
  assert not jobs
