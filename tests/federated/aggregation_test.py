"""Tests of federated.aggregation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from federated import aggregation


def _bases(count, d, k, seed):
  rng = np.random.default_rng(seed)
  return np.stack([np.linalg.qr(rng.normal(size=(d, k)))[0]
                   for _ in range(count)])


def _projector(u):
  return u @ u.T


def test_weights():
  np.testing.assert_allclose(aggregation.size_weights([1, 3]), [0.25, 0.75])


def test_subspace_aggregate_is_top_k_of_weighted_projectors():
  bases = _bases(4, 9, 3, 0)
  w = np.array([0.1, 0.2, 0.3, 0.4])
  agg = np.asarray(aggregation.subspace_aggregate(jnp.asarray(bases),
                                                  jnp.asarray(w)))
  np.testing.assert_allclose(agg.T @ agg, np.eye(3), atol=1e-5)
  m = sum(wi * _projector(u) for wi, u in zip(w, bases, strict=True))
  vals, vecs = np.linalg.eigh(m)
  top = vecs[:, np.argsort(vals)[::-1][:3]]
  np.testing.assert_allclose(_projector(agg), _projector(top), atol=1e-5)


def test_subspace_aggregate_ignores_signs_and_rotations():
  bases = _bases(3, 8, 2, 1)
  w = jnp.asarray([0.5, 0.3, 0.2])
  ref = aggregation.subspace_aggregate(jnp.asarray(bases), w)
  rng = np.random.default_rng(2)
  changed = []
  for u in bases:
    rotation = np.linalg.qr(rng.normal(size=(2, 2)))[0]
    changed.append(-u @ rotation)
  new = aggregation.subspace_aggregate(jnp.asarray(np.stack(changed)), w)
  np.testing.assert_allclose(_projector(np.asarray(new)),
                             _projector(np.asarray(ref)), atol=1e-5)
  # The paper's formula is not invariant: flipping one sign changes it.
  paper = aggregation.paper_aggregate(jnp.asarray(bases), w)
  flipped = bases.copy()
  flipped[0] *= -1
  assert not np.allclose(
      paper, aggregation.paper_aggregate(jnp.asarray(flipped), w))


def test_paper_formulas_as_printed():
  bases = _bases(3, 5, 2, 3)
  w = np.array([0.2, 0.3, 0.5])
  expected = sum(wi * u for wi, u in zip(w, bases, strict=True)) / 3
  np.testing.assert_allclose(
      aggregation.paper_aggregate(jnp.asarray(bases), jnp.asarray(w)),
      expected, atol=1e-6)
  betas = np.arange(12.0).reshape(3, 2, 2)
  weighted = np.tensordot(w, betas, axes=1)
  np.testing.assert_allclose(
      aggregation.model_aggregate(jnp.asarray(betas), jnp.asarray(w)),
      weighted, rtol=1e-6)
  np.testing.assert_allclose(
      aggregation.model_aggregate(jnp.asarray(betas), jnp.asarray(w),
                                  paper=True), weighted / 3, rtol=1e-6)


def _near_common_subspace(count, d, k, seed, spread):
  """Orthonormal bases within ``spread`` of one common k-dim subspace."""
  rng = np.random.default_rng(seed)
  common = np.linalg.qr(rng.normal(size=(d, k)))[0]
  return np.stack([np.linalg.qr(common + spread * rng.normal(size=(d, k)))[0]
                   for _ in range(count)])


def test_subspace_topk_agrees_with_eigh_on_a_gapped_aggregate():
  bases = _near_common_subspace(5, 12, 3, 4, spread=0.1)
  w = jnp.asarray([0.1, 0.15, 0.2, 0.25, 0.3])
  m = np.asarray(aggregation.weighted_projector_sum(jnp.asarray(bases), w))
  values = np.linalg.eigvalsh(m.astype(np.float64))[::-1]
  gap = values[2] - values[3]
  assert gap > 0.5, values  # the premise: a well-separated top 3
  exact = np.asarray(aggregation.subspace_aggregate(jnp.asarray(bases), w))
  key = jax.random.key(0)
  got = np.asarray(aggregation.subspace_aggregate(
      jnp.asarray(bases), w, topk="subspace", key=key))
  np.testing.assert_allclose(got.T @ got, np.eye(3), atol=1e-5)
  # float32 (u ≈ 6e-8): forming and iterating on M perturbs it by about
  # d·u·‖M‖ ≈ 1e-6, which moves the projector by that over the gap
  # (Davis–Kahan); 16 iterations of a block of 14 leave
  # (λ₁₅/λ₃)¹⁶ ≈ 0. 1e-4 is well above both and far below the 0.1 spread
  # of the participants' own subspaces.
  np.testing.assert_allclose(_projector(got), _projector(exact), atol=1e-4)
  # Both in canonical signs: the bases themselves agree.
  np.testing.assert_allclose(got, exact, atol=1e-4)
  again = aggregation.subspace_aggregate(jnp.asarray(bases), w,
                                         topk="subspace", key=key)
  np.testing.assert_array_equal(np.asarray(again), got)  # pure


def test_subspace_topk_needs_a_key_and_a_known_route():
  bases = jnp.asarray(_bases(2, 5, 2, 5))
  w = jnp.asarray([0.5, 0.5])
  with pytest.raises(ValueError, match="needs key"):
    aggregation.subspace_aggregate(bases, w, topk="subspace")
  with pytest.raises(ValueError, match="only by topk='subspace'"):
    aggregation.subspace_aggregate(bases, w, key=jax.random.key(0))
  with pytest.raises(ValueError, match="topk must be one of"):
    aggregation.subspace_aggregate(bases, w, topk="lanczos")


def test_weighted_projector_sum():
  bases = _bases(3, 6, 2, 6)
  w = np.array([0.2, 0.3, 0.5])
  expected = sum(wi * _projector(u) for wi, u in zip(w, bases, strict=True))
  np.testing.assert_allclose(
      aggregation.weighted_projector_sum(jnp.asarray(bases), jnp.asarray(w)),
      expected, atol=1e-6)
