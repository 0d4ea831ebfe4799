"""Tests of mechanisms.lvq.clip: closed-form per-example clipped sums."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechanisms.lvq import clip as lvq_clip
from tests.dpcore import products
from tests.mechanisms.lvq.problems import (
  MODELS,
  D,
  N,
  problem,
)

_ghost = jax.jit(lvq_clip.clipped_gradient_sum,
                 static_argnames=("phi_kind",))
_plain = jax.jit(lvq_clip.clipped_gradient_sum_vmap,
                 static_argnames=("phi_kind",))


@pytest.mark.parametrize("model, rank", MODELS)
@pytest.mark.parametrize("phi_kind", ["identity", "sigmoid"])
@pytest.mark.slow
def test_closed_form_clipping_equals_vmap_path(model, rank, phi_kind):
  params, x, y, labels = problem(2, model=model, rank=rank)
  x = x.at[:5].multiply(40.0)            # big gradients: clipping active
  mask = (jnp.arange(N) % 4 != 0).astype(jnp.float32)
  for clip in (0.05, 1e6):
    got, norms = _ghost(
        params, x, y, labels, clip_norm=clip, mask=mask, phi_kind=phi_kind)
    ref, ref_norms = _plain(
        params, x, y, labels, clip_norm=clip, mask=mask, phi_kind=phi_kind)
    # float32 tolerances: sums of ~40 terms of O(1) products.
    np.testing.assert_allclose(norms, ref_norms, rtol=1e-4, atol=1e-6)
    for k in params:
      np.testing.assert_allclose(got[k], ref[k], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model, rank", MODELS)
def test_each_example_contribution_is_bounded(model, rank):
  params, x, y, labels = problem(3, model=model, rank=rank)
  adversarial = jnp.stack([
      jnp.full((D,), 1e4),                    # far from everything
      params["prototypes"][0],                # exactly on a prototype
      params["prototypes"][1] + 1e-7,         # next to a wrong one
      (params["prototypes"][0] + params["prototypes"][2]) / 2,  # a tie
      jnp.full((D,), jnp.inf),                # non-finite
      -jnp.full((D,), 1e3),
  ])
  xa = jnp.concatenate([adversarial, x[:6]])
  ya = jnp.concatenate([jnp.array([0, 1, 0, 2, 1, 2]), y[:6]])
  clip = 0.3
  full, _ = _ghost(params, xa, ya, labels, clip_norm=clip,
                   mask=jnp.ones(xa.shape[0]))
  for i in range(xa.shape[0]):
    without = jnp.ones(xa.shape[0]).at[i].set(0.0)
    part, _ = _ghost(params, xa, ya, labels, clip_norm=clip, mask=without)
    diff = jax.tree.map(lambda a, b: a - b, full, part)
    change = float(jnp.sqrt(sum(jnp.sum(v * v) for v in diff.values())))
    assert np.isfinite(change)
    assert change <= clip * (1 + 1e-4)


def test_clipped_sums_require_the_mask_and_bound_it():
  # These sums feed dp_aggregate(presummed=True), which cannot mask a sum:
  # the mask is required here, and a weight of 5 counts once.
  params, x, y, labels = problem(6, model="gmlvq")
  for fn in (lvq_clip.clipped_gradient_sum,
             lvq_clip.clipped_gradient_sum_vmap):
    with pytest.raises(ValueError, match="mask is required"):
      fn(params, x, y, labels, clip_norm=0.1)
  odd = jnp.ones(N).at[0].set(5.0).at[1].set(jnp.nan).at[2].set(-1.0)
  ref = jnp.ones(N).at[1].set(0.0).at[2].set(0.0)
  for fn in (_ghost, _plain):
    got, _ = fn(params, x, y, labels, clip_norm=0.1, mask=odd)
    want, _ = fn(params, x, y, labels, clip_norm=0.1, mask=ref)
    for k in params:
      np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model, rank", MODELS)
def test_the_closed_form_sum_traces_every_product_at_full_precision(
    model, rank):
  # Its norms and its sum are products of the forward pass's quantities
  # (the vmap path clips the gradients it computes: no product after).
  params, x, y, labels = problem(4, model=model, rank=rank)
  mask = jnp.ones(x.shape[0])
  found = products.below_full_precision(
      lambda p, a, b: lvq_clip.clipped_gradient_sum(
          p, a, b, labels, clip_norm=0.3, mask=mask), params, x, y)
  assert not found, found
