"""Test accuracy of a trained run, as each mechanism is scored.

Federated mechanisms (``feddpdr``, ``nonpriv``): the global basis and the
global model on the held-out test set. Local ones (``dpdr_dpml``,
``dpml``): each participant's own (Ûᵢ, β̂ᵢ) on the whole test set, the
accuracy being the mean over participants. Test rows are preprocessed like
the training rows; the test set is public.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from dpcore import metrics
from federated import sharding
from federated.feddpdr.arrays import TrainOutput
from federated.feddpdr.settings import Config, Static, program
from mechanisms.erm import objective_perturbation as op

__all__ = ["evaluate"]


@partial(jax.jit, static_argnames=("static", "num_classes", "chunk"))
def _evaluate(out: TrainOutput, x_test, y_test, *, static: Static,
              num_classes: int, chunk):
  def predict(basis, betas):
    z = x_test if basis is None else x_test @ basis
    scores = op.decision_scores(z, betas, num_classes)
    return jnp.argmax(scores, axis=-1)

  def score(basis, betas):
    return metrics.accuracy(y_test, predict(basis, betas))

  mech = static.description
  if mech.federated:
    return jax.vmap(score)(out.global_basis, out.global_betas), None
  # Local models: every participant's model on the whole test set, mapped
  # ``chunk`` participants at a time when given (as in training).
  each = partial(sharding.over_participants, mesh=None, chunk=chunk)
  if mech.reduces:  # each participant's own basis
    per = jax.vmap(each(score))(out.bases, out.betas)
  else:
    per = jax.vmap(each(lambda w: score(None, w)))(out.betas)
  return jnp.mean(per, axis=1), per


def evaluate(out: TrainOutput, x_test, y_test, *, config: Config | Static,
             num_classes: int, chunk: int | None = None):
  """Test accuracy per repeat, and per participant for local mechanisms.

  Jitted (one module-level ``jax.jit``); call under ``jax.enable_x64``.

  Returns:
    ``(accuracy (S,), per_participant (S, N) or None)``.
  """
  return _evaluate(out, jnp.asarray(x_test, jnp.float64),
                   jnp.asarray(y_test), static=program(config),
                   num_classes=num_classes, chunk=chunk)
