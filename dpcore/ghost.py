"""Clipped gradient sums without per-example gradients, for layered models.

DP-SGD needs Σᵢ clip_C(∇ℓᵢ), the sum of every example's gradient scaled to
norm at most C. Computing it as ``vmap(grad)`` materialises B copies of
the parameters. For the layers below the per-example norm and the clipped
sum both follow from quantities an ordinary backward pass already has:

* a dense layer z = x W + b on one example with inputs X (T × d_in, T = 1
  for a vector) and output gradients G (T × d_out) has ∇W = XᵀG and
  ∇b = Σₜ gₜ, so ‖∇W‖² = ‖x‖²‖g‖² for T = 1 and Σ (XXᵀ) ⊙ (GGᵀ) otherwise
  (or ‖XᵀG‖² itself when that is smaller to form);
* an embedding lookup of ids (T,) into a table has ∇table = Σₜ e_{idₜ} gₜᵀ,
  so ‖∇table‖² = Σₜₛ [idₜ = idₛ] gₜ·gₛ.

The joint norm of an example is the root of the sum of its layers'
squares; the clipped sum is then one weighted product per layer,
Xᵀ diag(c) G with cᵢ = maskᵢ·min(1, C/‖∇ℓᵢ‖) (Goodfellow 2015; ghost
clipping, Li et al. 2022; book-keeping, Bu et al. 2023). One forward pass
and one backward pass to the layer outputs give every X and G; no
parameter gradient is formed twice.

A model opts in by reaching its parameters only through the layer
functions of the :class:`Layers` object it is handed. The loss is written
for ONE example, as for :func:`dpcore.trainer.train`, with ``layers`` in
place of ``params``::

    def loss(layers, example):
      x, y = example
      h = jax.nn.relu(layers.dense("hidden", x))
      logits = layers.dense("out", h)
      return optax.softmax_cross_entropy_with_integer_labels(logits, y)

    fast = ghost.layered(loss)             # a loss the trainer recognises
    trainer.train(key, plan, fast, params, (x, y), optax.sgd(0.5))

``params`` is a dict from layer name to ``{"w": (d_in, d_out), "b":
(d_out,)}`` (``"b"`` optional) for dense layers and ``{"table": (V, d)}``
for embeddings (:func:`init_dense`, :func:`init_embedding`). The same
``fast`` is an ordinary per-example loss ``fast(params, example)`` (the
``vmap(grad)`` reference path) and :func:`apply` evaluates any function of
``layers`` on a batch (predictions).

Which models get the fast path: every parameter is a dense layer's weight
or bias or an embedding table, each layer used once per example (on a
vector or a sequence of vectors); any activation, loss or parameter-free
operation in between. Weight tying (one layer called twice), normalisation
layers with parameters, convolutions and anything else take the
``vmap(grad)`` path of :func:`dpcore.trainer.train` (pass an ordinary
``loss(params, example)``); the G(M)LVQ models keep their own closed form
(:mod:`mechanisms.lvq.clip`).

Privacy: the example axis is mapped by ``vmap``, so example i's loss and
hence its gradient depend on row i alone, and the layer rules above are
exact, so ‖Σ contribution of i‖ ≤ C whatever the data: the same
sensitivity as :func:`dpcore.clipping.clipped_sum`. Non-finite norms give
the example weight 0 (its row contributes nothing), as there. The mask is
bounded to [0, 1].
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from dpcore import clipping, linalg, validation

PyTree = Any

__all__ = [
    "LayeredLoss", "Layers", "apply", "init_dense", "init_embedding",
    "layered",
]

_DENSE_KEYS = ({"w"}, {"w", "b"})
_NORM_FLOOR = 2.0 ** -63
"""√(float32's smallest normal): the least norm whose square is exact."""
_EMBED_KEYS = ({"table"},)


def _check_layer(params, name: str, kind: str) -> dict:
  if not isinstance(params, dict) or name not in params:
    have = sorted(params) if isinstance(params, dict) else type(params)
    raise ValueError(
        f"layer {name!r} is not in params (params must be a dict from layer "
        f"name to that layer's arrays; it has {have}).")
  layer = params[name]
  allowed = _DENSE_KEYS if kind == "dense" else _EMBED_KEYS
  if not isinstance(layer, dict) or set(layer) not in allowed:
    want = " or ".join(str(sorted(k)) for k in allowed)
    got = sorted(layer) if isinstance(layer, dict) else type(layer)
    raise ValueError(
        f"params[{name!r}] must be a {kind} layer, a dict with keys {want}, "
        f"got {got}.")
  return layer


def _check_params(params) -> None:
  """Every entry is a dense or embedding layer (nothing escapes the norm)."""
  if not isinstance(params, dict):
    raise ValueError(
        f"params of a layered loss must be a dict from layer name to a "
        f"dense ({{'w', 'b'}}) or embedding ({{'table'}}) layer, got "
        f"{type(params).__name__}.")
  for name, layer in params.items():
    keys = set(layer) if isinstance(layer, dict) else None
    if keys not in _DENSE_KEYS + _EMBED_KEYS:
      raise ValueError(
          f"params[{name!r}] is not a dense layer {{'w'[, 'b']}} or an "
          f"embedding {{'table'}} (got "
          f"{sorted(keys) if keys is not None else type(layer).__name__}); "
          f"a layered loss reaches every parameter through a layer whose "
          f"per-example norm is known. Use the vmap path "
          f"(trainer.train with an ordinary loss) for other parameters.")


class Layers:
  """The layer functions a layered loss calls (one per parameter group).

  Handed to the loss by :class:`LayeredLoss`; never built by users. Each
  layer may be called once per example (weight tying is refused: the
  per-example norm of a layer used twice is not the sum of the parts).
  """

  def __init__(self, params: dict, probes: dict | None = None):
    self._params = params
    self._probes = probes
    self._used: set[str] = set()
    self.inputs: dict[str, jax.Array] = {}
    self.shapes: dict[str, jax.ShapeDtypeStruct] = {}

  def _use(self, name: str) -> None:
    if not isinstance(name, str):
      raise TypeError(f"a layer name must be a string, got {name!r}.")
    if name in self._used:
      raise ValueError(
          f"layer {name!r} is called twice for one example; a layered loss "
          f"uses each layer once (weight tying takes the vmap path).")
    self._used.add(name)

  def _out(self, name: str, z: jax.Array) -> jax.Array:
    self.shapes[name] = jax.ShapeDtypeStruct(z.shape, z.dtype)
    if self._probes is not None:
      z = z + self._probes[name]
    return z

  def dense(self, name: str, x: jax.Array) -> jax.Array:
    """``x @ w + b`` of layer ``name``; ``x`` is (..., d_in)."""
    self._use(name)
    layer = _check_layer(self._params, name, "dense")
    x = jnp.asarray(x)
    w = layer["w"]
    if w.ndim != 2 or x.ndim < 1 or x.shape[-1] != w.shape[0]:
      raise ValueError(
          f"dense layer {name!r}: w has shape {w.shape} and x {x.shape}; "
          f"w must be (d_in, d_out) with d_in = x.shape[-1].")
    z = x @ w
    if "b" in layer:
      z = z + layer["b"]
    self.inputs[name] = x
    return self._out(name, z)

  def embed(self, name: str, ids: jax.Array) -> jax.Array:
    """Rows ``table[ids]`` of layer ``name``; ``ids`` integer, any shape."""
    self._use(name)
    layer = _check_layer(self._params, name, "embed")
    ids = jnp.asarray(ids)
    if not jnp.issubdtype(ids.dtype, jnp.integer):
      raise ValueError(f"embedding {name!r} needs integer ids, got dtype "
                       f"{ids.dtype}.")
    table = layer["table"]
    if table.ndim != 2:
      raise ValueError(f"embedding {name!r}: table must be (V, d), got "
                       f"shape {table.shape}.")
    # Out-of-range ids read (and are credited to) the clamped row, the
    # same on both paths.
    ids = jnp.clip(ids, 0, table.shape[0] - 1)
    self.inputs[name] = ids
    return self._out(name, table[ids])


@dataclasses.dataclass(frozen=True)
class LayeredLoss:
  """A per-example loss written on :class:`Layers` (see :func:`layered`).

  Calling it as ``loss(params, example)`` evaluates it like any loss
  (the ``vmap(grad)`` reference path uses exactly this);
  :meth:`clipped_sum` is the fast path the trainer takes.
  """
  fn: Callable[[Layers, PyTree], jax.Array]

  def __call__(self, params: dict, example: PyTree) -> jax.Array:
    _check_params(params)
    return self.fn(Layers(params), example)

  def clipped_sum(self, params: dict, batch: PyTree, mask: jax.Array,
                  clip_norm) -> dict:
    """Σᵢ maskᵢ · clip_C(∇ℓᵢ) from per-layer inputs and output gradients.

    The signature of :data:`dpcore.trainer.ClippedSumFn`: ``batch`` has a
    leading example axis, ``mask`` is its (B,) 0/1 mask (bounded to
    [0, 1]), ``clip_norm`` is C. Returns a params-shaped pytree.
    """
    _check_params(params)
    validation.check_scale(clip_norm, "clip_norm", allow_zero=False)
    sizes = {jnp.shape(a)[0] for a in jax.tree.leaves(batch)}
    if len(sizes) != 1 or jnp.shape(mask) != (next(iter(sizes)),):
      raise ValueError(
          f"batch leaves need one common leading example axis matching "
          f"mask's shape, got leading sizes {sorted(sizes)} and mask "
          f"{jnp.shape(mask)}.")
    size = next(iter(sizes))
    example = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:],
                                                          a.dtype), batch)

    def shapes_of(ex):
      layers = Layers(params)
      value = self.fn(layers, ex)
      if jnp.shape(value) != ():
        raise ValueError(
            f"a layered loss returns one scalar per example, got shape "
            f"{jnp.shape(value)}.")
      return layers.shapes

    shapes = jax.eval_shape(shapes_of, example)
    probes = {name: jnp.zeros((size,) + s.shape, s.dtype)
              for name, s in shapes.items()}

    def forward(probes):
      def one(probe, ex):
        layers = Layers(params, probe)
        return self.fn(layers, ex), layers.inputs
      return jax.vmap(one)(probes, batch)

    losses, pullback, inputs = jax.vjp(forward, probes, has_aux=True)
    (outs,) = pullback(jnp.ones_like(losses))
    norms = _norms([_layer_squares(params[name], inputs[name], outs[name])
                    for name in shapes], size)
    keep = jnp.isfinite(norms)
    # A norm under 2^-63 may have lost its smallest parts' squares below
    # float32's range: such norms count as 2^-63, which keeps every
    # contribution within C whatever C is.
    weights = clipping.clip_weights(mask) * jnp.minimum(
        1.0, clip_norm / jnp.maximum(jnp.where(keep, norms, 1.0), _NORM_FLOOR))
    weights = jnp.where(keep, weights, 0.0)
    grads = {}
    for name, layer in params.items():
      if name not in shapes:
        grads[name] = jax.tree.map(jnp.zeros_like, layer)
      else:
        grads[name] = _layer_sum(layer, inputs[name], outs[name], weights,
                                 keep)
    return grads


def layered(fn: Callable[[Layers, PyTree], jax.Array]) -> LayeredLoss:
  """Marks ``fn(layers, example) -> scalar`` as a layered loss.

  :func:`dpcore.trainer.train` then clips through
  :meth:`LayeredLoss.clipped_sum` (no per-example gradients); the result
  equals the ``vmap(grad)`` path's to float rounding.
  """
  if isinstance(fn, LayeredLoss):
    return fn
  if not callable(fn):
    raise TypeError(f"layered needs a function fn(layers, example), got "
                    f"{fn!r}.")
  return LayeredLoss(fn)


def apply(fn: Callable[..., Any], params: dict, *args, **kwargs) -> Any:
  """``fn(layers, *args, **kwargs)`` with ``params``' layers (no probes).

  For evaluation: a function written with ``layers.dense`` on the last axis
  works on a whole batch at once, e.g. ``apply(logits, params, x_test)``.
  """
  _check_params(params)
  if isinstance(fn, LayeredLoss):
    fn = fn.fn
  return fn(Layers(params), *args, **kwargs)


def init_dense(key: jax.Array, d_in: int, d_out: int, *,
               bias: bool = True, scale: float | None = None) -> dict:
  """A dense layer ``{"w": N(0, scale²), "b": 0}``; scale 1/√d_in default.

  Initial parameters drawn from a key alone are data-independent.
  """
  validation.check_key(key)
  d_in = validation.check_positive_int(d_in, "d_in")
  d_out = validation.check_positive_int(d_out, "d_out")
  scale = 1.0 / math.sqrt(d_in) if scale is None else (
      validation.check_non_negative(scale, "scale"))
  layer = {"w": scale * jax.random.normal(key, (d_in, d_out))}
  if bias:
    layer["b"] = jnp.zeros((d_out,))
  return layer


def init_embedding(key: jax.Array, vocab: int, dim: int, *,
                   scale: float = 1.0) -> dict:
  """An embedding ``{"table": N(0, scale²)}`` of shape (vocab, dim)."""
  validation.check_key(key)
  vocab = validation.check_positive_int(vocab, "vocab")
  dim = validation.check_positive_int(dim, "dim")
  scale = validation.check_non_negative(scale, "scale")
  return {"table": scale * jax.random.normal(key, (vocab, dim))}


# -- per-layer norms and weighted sums ----------------------------------------


def _flat(a: jax.Array, keep_last: bool) -> jax.Array:
  """(B, ..., d) -> (B, T, d), or (B, ...) -> (B, T) for ids."""
  size = a.shape[0]
  if keep_last:
    return a.reshape(size, -1, a.shape[-1])
  return a.reshape(size, -1)


def _half_exponent(a: jax.Array) -> jax.Array:
  """Per example (leading axis) the integer h with 2^(2h) near the largest
  magnitude of ``a``: ``a · 2^(-2h)`` peaks in [0.5, 2). 0 for an example
  whose peak is zero, subnormal or not finite (left as it is)."""
  return clipping.half_exponent(
      jnp.max(jnp.abs(a), axis=tuple(range(1, a.ndim)), initial=0.0))


def _times_power_of_two(v: jax.Array, k: jax.Array) -> jax.Array:
  """v · 2^k per example (integer k), exact unless the result
  leaves the dtype's range: eight factors on the same side of 1, so no
  intermediate leaves the range before the result does."""
  one = jnp.ones((), v.dtype)
  k = jnp.clip(k, -400, 400)  # beyond: 0 or inf whatever v (|log2 v| < 200)
  part = jnp.sign(k) * (jnp.abs(k) // 8)
  for p in (part,) * 7 + (k - 7 * part,):
    v = v * jnp.ldexp(one, p).reshape(p.shape + (1,) * (v.ndim - 1))
  return v


def _scaled(a: jax.Array, h: jax.Array) -> jax.Array:
  """``a · 2^(-2h)`` per example, exactly (two factors of 2^-h)."""
  unit = jnp.ldexp(jnp.ones((), a.dtype), -h).reshape(
      h.shape + (1,) * (a.ndim - 1))
  return a * unit * unit


@linalg.full_precision
def _layer_squares(layer: dict, inputs: jax.Array, outs: jax.Array
                   ) -> list[tuple[jax.Array, jax.Array]]:
  """Per example, this layer's parts of ‖∇‖² (weights, then bias) as
  pairs ``(s, h)`` of shape (B,): each part is s · 2^(4h).

  Each example's inputs and output gradients are scaled by powers of two
  to peak near 1 before any product, so no square of a tiny or huge
  factor leaves float32's range (a row of 1e-19 features with a 1e19
  output gradient has a gradient of norm about 1, whose factors' squares
  underflow); the scaling is exact, so where the unscaled products stay
  in range the parts are the unscaled squares' bits times 2^(-4h).
  """
  g = _flat(outs, True).astype(jnp.float32)
  hg = _half_exponent(g)
  g = _scaled(g, hg)
  if "table" in layer:
    ids = _flat(inputs, False)
    if ids.shape[1] == 1:
      return [(jnp.sum(g * g, axis=(1, 2)), hg)]
    same = ids[:, :, None] == ids[:, None, :]
    gram = jnp.einsum("btd,bsd->bts", g, g)
    return [(jnp.sum(jnp.where(same, gram, 0.0), axis=(1, 2)), hg)]
  x = _flat(inputs, True).astype(jnp.float32)
  hx = _half_exponent(x)
  x = _scaled(x, hx)
  steps, d_in, d_out = x.shape[1], x.shape[2], g.shape[2]
  if steps == 1:
    square = jnp.sum(x * x, axis=(1, 2)) * jnp.sum(g * g, axis=(1, 2))
  elif steps * steps <= d_in * d_out:
    square = jnp.sum(jnp.einsum("bti,bsi->bts", x, x)
                     * jnp.einsum("bto,bso->bts", g, g), axis=(1, 2))
  else:
    per_example = jnp.einsum("bti,bto->bio", x, g)
    square = jnp.sum(per_example * per_example, axis=(1, 2))
  parts = [(square, hx + hg)]
  if "b" in layer:
    bias = jnp.sum(g, axis=1)
    parts.append((jnp.sum(bias * bias, axis=1), hg))
  return parts


def _norms(layers: list[list[tuple[jax.Array, jax.Array]]], size: int
           ) -> jax.Array:
  """Per example √(Σ s · 2^(4h)) over every layer's parts, without leaving
  float32's range on the way: the parts are summed (each layer's, then
  the layers') at the scale 2^-M of the largest of them (M even), and the
  root scaled back by 2^(M/2); the same bits as the root of the plain sum
  where that stays in range."""
  parts = [part for layer in layers for part in layer]
  if not parts:
    return jnp.zeros((size,), jnp.float32)
  low = jnp.iinfo(jnp.int32).min // 2
  tops = []
  for s, h in parts:
    _, exponent = jnp.frexp(s)
    tops.append(jnp.where(jnp.isfinite(s) & (s > 0), exponent + 4 * h, low))
  top = functools.reduce(jnp.maximum, tops)
  top = jnp.where(top == low, 0, top + top % 2)  # even: an exact root
  total = sum(sum(_times_power_of_two(s, 4 * h - top) for s, h in layer)
              for layer in layers)
  return _times_power_of_two(jnp.sqrt(total), top // 2)


@linalg.full_precision
def _layer_sum(layer: dict, inputs: jax.Array, outs: jax.Array,
               weights: jax.Array, keep: jax.Array) -> dict:
  """Σᵢ wᵢ ∇ᵢ of one layer as one weighted product (params-shaped)."""
  g = _flat(outs, True)
  g = jnp.where(keep[:, None, None], g * weights[:, None, None].astype(
      g.dtype), 0.0)
  if "table" in layer:
    ids = _flat(inputs, False)
    table = jnp.zeros_like(layer["table"])
    return {"table": table.at[ids.reshape(-1)].add(
        g.reshape(-1, g.shape[-1]).astype(table.dtype))}
  x = _flat(inputs, True)
  x = jnp.where(keep[:, None, None], x, 0.0)
  out = {"w": jnp.einsum("bti,bto->io", x, g).astype(layer["w"].dtype)}
  if "b" in layer:
    out["b"] = jnp.sum(g, axis=(0, 1)).astype(layer["b"].dtype)
  return out
