"""Tests for dpcore.ghost: clipped sums from layer inputs and output grads.

The oracle is the vmap(grad) path (dpcore.trainer.per_example_clipped_sum
of the same loss): same parameters to float tolerance, per clipped sum and
after whole DP-SGD runs with the same keys.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpcore import clipping, ghost, trainer
from tests.dpcore import products

N, D, K = 64, 12, 5


def _data(key, n=N, d=D, k=K):
  kx, ky = jax.random.split(key)
  x = jax.random.normal(kx, (n, d))
  return x, jax.random.randint(ky, (n,), 0, k)


def _linear(layers, example):
  x, y = example
  s = layers.dense("w", x)[0]
  return optax.sigmoid_binary_cross_entropy(s, (y % 2).astype(s.dtype))


def _softmax(layers, example):
  x, y = example
  return optax.softmax_cross_entropy_with_integer_labels(
      layers.dense("out", x), y)


def _mlp(layers, example):
  x, y = example
  h = jnp.tanh(layers.dense("hidden", x))
  h = jax.nn.relu(layers.dense("hidden2", h))
  return optax.softmax_cross_entropy_with_integer_labels(
      layers.dense("out", h), y)


def _sequence(layers, example):
  # Dense layers applied at every position of a (T, d) input: the Gram
  # form of the norm (T² ≤ d_in·d_out) and the materialised one.
  x, y = example
  h = jnp.tanh(layers.dense("wide", x.reshape(4, D // 4)))  # 16 ≤ 3·8
  h = jnp.tanh(layers.dense("narrow", h.reshape(8, 4)))     # 64 > 4·2
  return optax.softmax_cross_entropy_with_integer_labels(
      layers.dense("out", h.reshape(-1)), y)


def _tokens(layers, example):
  # Token ids with repeats within an example (the embedding's cross terms).
  x, y = example
  ids = (jnp.abs(x[:6]) * 3).astype(jnp.int32) % 7
  e = layers.embed("emb", ids)
  single = layers.embed("cls", y)
  return optax.softmax_cross_entropy_with_integer_labels(
      layers.dense("out", jnp.mean(e, axis=0) + single), y)


def _params(name, key):
  k = jax.random.split(key, 4)
  if name == "linear":
    return {"w": ghost.init_dense(k[0], D, 1, bias=False, scale=1.0)}
  if name == "softmax":
    return {"out": ghost.init_dense(k[0], D, K, scale=1.0)}
  if name == "mlp":
    return {"hidden": ghost.init_dense(k[0], D, 8),
            "hidden2": ghost.init_dense(k[1], 8, 6),
            "out": ghost.init_dense(k[2], 6, K)}
  if name == "sequence":
    return {"wide": ghost.init_dense(k[0], D // 4, 8),
            "narrow": ghost.init_dense(k[1], 4, 2, bias=False),
            "out": ghost.init_dense(k[2], 16, K)}
  return {"emb": ghost.init_embedding(k[0], 7, 4),
          "cls": ghost.init_embedding(k[1], K, 4),
          "out": ghost.init_dense(k[2], 4, K)}


MODELS = {"linear": _linear, "softmax": _softmax, "mlp": _mlp,
          "sequence": _sequence, "tokens": _tokens}


def _assert_trees_close(a, b, rtol=2e-5, atol=2e-6):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(u, v, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.slow
def test_clipped_sum_equals_the_vmap_path(name):
  loss = ghost.layered(MODELS[name])
  params = _params(name, jax.random.key(1))
  x, y = _data(jax.random.key(2))
  mask = (jnp.arange(N) < N - 9).astype(jnp.float32)   # 9 padding slots
  clip_norms = jnp.array([0.05, 1.0, 1e4, 1e9])  # 1e9: nothing is clipped

  @jax.jit
  def both(c):
    return (loss.clipped_sum(params, (x, y), mask, c),
            trainer.per_example_clipped_sum(loss)(params, (x, y), mask, c))

  fast, slow = jax.vmap(both)(clip_norms)
  _assert_trees_close(fast, slow)
  # The comparison can fail: the unclipped sum (C = 1e9) is a different
  # answer where C = 0.05 binds.
  first = jax.tree.leaves(fast)[0]
  assert not np.allclose(first[0], first[-1], atol=1e-3)


def test_every_example_moves_the_sum_by_at_most_c():
  loss = ghost.layered(_mlp)
  params = _params("mlp", jax.random.key(3))
  x, y = _data(jax.random.key(4))
  x = x * 50.0  # large gradients: every example is clipped
  one_hot = jnp.eye(N)
  contribution = jax.jit(jax.vmap(loss.clipped_sum,
                                  in_axes=(None, None, 0, None)))(
      params, (x, y), one_hot, 0.3)
  norms = jax.vmap(clipping.global_norm)(contribution)
  assert float(jnp.max(norms)) <= 0.3 * (1 + 1e-5)
  assert float(jnp.min(norms)) >= 0.3 * (1 - 1e-4)   # they were clipped
  # A mask above 1 does not count a row twice.
  heavy = loss.clipped_sum(params, (x, y), 5.0 * one_hot[0], 0.3)
  assert float(clipping.global_norm(heavy)) <= 0.3 * (1 + 1e-5)


def _squared_error(layers, example):
  x, y = example  # x: (T, 3), a sequence of T steps
  z = layers.dense("lin", x)[:, 0]
  return 0.5 * (jnp.sum(z * jnp.arange(1.0, z.shape[0] + 1)) - y) ** 2


@pytest.mark.parametrize("steps,bias,d_out", [
    (1, False, 1),   # one step: the product of the two squared norms
    (2, True, 2),    # the Gram path, a bias whose gradient cancels
    (9, True, 1),    # the per-example product path (81 > 3 x 1)
])
def test_tiny_features_with_a_huge_gradient_are_clipped(steps, bias, d_out):
  # Features of 1e-19 and an output gradient of 1e19: a per-example
  # gradient of norm about 1, whose factors' squares underflow float32.
  # Unscaled, the norm came out 0 and the row entered the sum unclipped
  # (1.73 and 2.60 against C = 0.1).
  params = {"lin": ghost.init_dense(jax.random.key(0), 3, d_out, bias=bias)}
  sign = jnp.where(jnp.arange(steps) % 2 == 0, 1.0, -1.0)[:, None]
  x = jnp.stack([1e-19 * sign * jnp.ones((steps, 3)),
                 0.1 * jnp.ones((steps, 3))]).astype(jnp.float32)
  y = jnp.array([1e19, 1.0], jnp.float32)
  loss = ghost.layered(_squared_error)
  mask = jnp.array([1.0, 0.0])
  fast = loss.clipped_sum(params, (x, y), mask, 0.1)
  slow = trainer.per_example_clipped_sum(loss)(params, (x, y), mask, 0.1)
  true = jax.grad(loss)(params, (x[0], y[0]))
  assert float(clipping.global_norm(true)) > 0.5   # the clip must bind
  assert float(clipping.global_norm(fast)) <= 0.1 * (1 + 1e-5)
  _assert_trees_close(fast, slow, rtol=1e-5, atol=1e-8)


def test_a_norm_below_the_squares_range_is_clipped_for_any_c():
  # A gradient of norm ~1e-24 (its square is below float32's range) and
  # C = 1e-26: the sum must still move by at most C.
  params = {"lin": ghost.init_dense(jax.random.key(0), 3, 1, bias=False)}
  x = jnp.full((1, 1, 3), 1e-12, jnp.float32)
  y = jnp.array([1e-12], jnp.float32)
  loss = ghost.layered(_squared_error)
  params = {"lin": {"w": jnp.zeros((3, 1), jnp.float32)}}
  fast = loss.clipped_sum(params, (x, y), jnp.ones(1), 1e-26)
  true = jax.grad(loss)(params, (x[0], y[0]))
  assert float(clipping.global_norm(true)) > 1e-25   # the clip must bind
  assert float(clipping.global_norm(fast)) <= 1e-26 * (1 + 1e-5)


def test_non_finite_examples_contribute_nothing_as_on_the_vmap_path():
  loss = ghost.layered(_softmax)
  params = _params("softmax", jax.random.key(5))
  x, y = _data(jax.random.key(6))
  x = x.at[3, 0].set(jnp.nan).at[7, 2].set(jnp.inf)
  mask = jnp.ones(N)
  fast = loss.clipped_sum(params, (x, y), mask, 1.0)
  slow = trainer.per_example_clipped_sum(loss)(params, (x, y), mask, 1.0)
  assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(fast))
  _assert_trees_close(fast, slow)
  keep = jnp.ones(N).at[3].set(0.0).at[7].set(0.0)
  clean = loss.clipped_sum(params, (jnp.nan_to_num(x), y), keep, 1.0)
  _assert_trees_close(fast, clean)


@pytest.mark.parametrize("name", ["linear", "softmax", "mlp"])
@pytest.mark.slow
def test_trainer_fast_path_gives_the_vmap_paths_parameters(name):
  loss = ghost.layered(MODELS[name])
  x, y = _data(jax.random.key(7), n=200)
  plan = trainer.make_plan(200, sampling_rate=0.1, steps=30, clip_norm=0.5,
                           noise_multiplier=0.7)
  init = _params(name, jax.random.key(8))

  @jax.jit
  def run(key):
    fast = trainer.train(key, plan, loss, init, (x, y), optax.sgd(0.3))
    slow = trainer.train(key, plan, None, init, (x, y), optax.sgd(0.3),
                         clipped_sum=trainer.per_example_clipped_sum(loss))
    return fast.params, slow.params

  fast, slow = run(jax.random.key(9))
  _assert_trees_close(fast, slow, rtol=1e-4, atol=1e-5)
  other, _ = run(jax.random.key(10))
  assert not np.allclose(jax.tree.leaves(other)[0], jax.tree.leaves(fast)[0])


def test_layered_loss_is_an_ordinary_loss_and_apply_evaluates_batches():
  loss = ghost.layered(_softmax)
  params = _params("softmax", jax.random.key(11))
  x, y = _data(jax.random.key(12))
  per_example = jax.vmap(loss, in_axes=(None, 0))(params, (x, y))
  logits = ghost.apply(lambda layers, v: layers.dense("out", v), params, x)
  np.testing.assert_allclose(
      per_example,
      optax.softmax_cross_entropy_with_integer_labels(logits, y), rtol=1e-5)
  assert ghost.layered(loss) is loss


def test_misuse_is_refused_at_trace_time():
  x, y = _data(jax.random.key(13))
  mask = jnp.ones(N)
  params = {"out": ghost.init_dense(jax.random.key(0), D, K)}

  def tied(layers, example):
    h = layers.dense("out", example[0])
    return jnp.sum(layers.dense("out", h[:D] if K >= D else
                                jnp.pad(h, (0, D - K))))

  with pytest.raises(ValueError, match="called twice"):
    ghost.layered(tied).clipped_sum(params, (x, y), mask, 1.0)
  with pytest.raises(ValueError, match="not a dense layer"):
    ghost.layered(_softmax).clipped_sum(
        {**params, "scale": jnp.ones(3)}, (x, y), mask, 1.0)
  with pytest.raises(ValueError, match="one scalar per example"):
    ghost.layered(lambda layers, ex: layers.dense("out", ex[0])
                  ).clipped_sum(params, (x, y), mask, 1.0)
  with pytest.raises(ValueError, match="not in params"):
    ghost.layered(lambda layers, ex: layers.dense("nope", ex[0])[0]
                  ).clipped_sum(params, (x, y), mask, 1.0)
  with pytest.raises(ValueError, match="d_in"):
    ghost.layered(lambda layers, ex: layers.dense("out", ex[0][:3])[0]
                  ).clipped_sum(params, (x, y), mask, 1.0)
  with pytest.raises(ValueError, match="mask"):
    ghost.layered(_softmax).clipped_sum(params, (x, y), jnp.ones(3), 1.0)
  with pytest.raises(ValueError, match="clip_norm"):
    ghost.layered(_softmax).clipped_sum(params, (x, y), mask, -1.0)
  with pytest.raises(TypeError, match="fn"):
    ghost.layered(3)


@pytest.mark.slow
def test_one_compilation_per_plan_and_unroll_does_not_change_the_result():
  traces = []

  def counted(layers, example):
    traces.append(1)
    return _softmax(layers, example)

  loss = ghost.layered(counted)
  x, y = _data(jax.random.key(14), n=120)
  plan = trainer.make_plan(120, sampling_rate=0.1, steps=12, clip_norm=0.5,
                           noise_multiplier=1.0)
  init = _params("softmax", jax.random.key(15))

  def run(key, x, y, unroll=1):
    return trainer.train(key, plan, loss, init, (x, y), optax.sgd(0.3),
                         unroll=unroll).params

  jitted = jax.jit(run)
  first = jitted(jax.random.key(16), x, y)
  count = len(traces)
  assert count > 0
  again = jitted(jax.random.key(17), x + 1.0, y)  # new key, new data values
  assert len(traces) == count                     # no new trace
  assert not np.allclose(first["out"]["w"], again["out"]["w"])
  unrolled = jax.jit(run, static_argnums=3)(jax.random.key(16), x, y, 5)
  _assert_trees_close(unrolled, first, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_clipped_batch_sums_vmap_over_participants():
  # Per-participant clipped sums (no noise), the federated building block:
  # one vmapped call equals a call per participant with its own key.
  loss = ghost.layered(_mlp)
  params = _params("mlp", jax.random.key(18))
  x, y = _data(jax.random.key(19), n=3 * 50)
  xs, ys = x.reshape(3, 50, D), y.reshape(3, 50)
  plan = trainer.make_plan(50, sampling_rate=0.2, steps=4, clip_norm=0.5,
                           noise_multiplier=1.0)
  keys = jax.random.split(jax.random.key(20), 3)

  def one(key, xp, yp):
    return trainer.clipped_batch_sum(key, plan, 2, loss, params, (xp, yp))

  sums, overflowed = jax.jit(jax.vmap(one))(keys, xs, ys)
  assert overflowed.shape == (3,) and not bool(jnp.any(overflowed))
  for p in range(3):
    alone, _ = one(keys[p], xs[p], ys[p])
    _assert_trees_close(jax.tree.map(lambda a, p=p: a[p], sums), alone)
  # Each participant's sum is its own: another participant's rows differ.
  assert not np.allclose(sums["out"]["w"][0], sums["out"]["w"][1])
  # The sum is the same one the vmap(grad) path forms.
  slow, _ = trainer.clipped_batch_sum(
      keys[0], plan, 2, None, params, (xs[0], ys[0]),
      clipped_sum=trainer.per_example_clipped_sum(loss))
  _assert_trees_close(jax.tree.map(lambda a: a[0], sums), slow)


@pytest.mark.parametrize("name", ["mlp", "softmax"])
def test_the_norms_and_the_sum_are_traced_at_full_precision(name):
  # On a GPU the default would compute the norms and the sum from
  # TensorFloat-32 operands: an example then moved the sum by 1.0004 C.
  # The model's own products (its forward and backward pass, from whose
  # outputs both the norms and the sum are computed) keep the default, as
  # on the vmap path, which clips the gradients they give.
  loss = ghost.layered(MODELS[name])
  params = _params(name, jax.random.key(1))
  x, y = _data(jax.random.key(2))
  mask = jnp.ones(N)
  model = {"dpcore/ghost.py:Layers.dense"}
  for clipped_sum in (loss.clipped_sum,
                      trainer.per_example_clipped_sum(loss)):
    found = products.below_full_precision(
        clipped_sum, params, (x, y), mask, 0.3)
    assert set(found) == model, found
