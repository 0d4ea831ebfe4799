"""Tests of federated.feddpdr.evaluation: the global model of a federated
mechanism, each participant's own model of a local one."""

import jax
import numpy as np

from federated import feddpdr

# Two test rows of two classes in d = 2; one basis keeps coordinate 0.
X = np.array([[1.0, 0.0], [-1.0, 0.0]])
Y = np.array([1, 0])
BASIS = np.array([[1.0], [0.0]])
RIGHT, WRONG = np.array([[1.0]]), np.array([[-1.0]])  # one fit (K = 2)


def _output(betas, global_betas):
  return feddpdr.TrainOutput(
      bases=np.broadcast_to(BASIS, (1, 2, 2, 1)), betas=betas[None],
      global_basis=BASIS[None], global_betas=global_betas[None],
      grad_norm=np.zeros((1, 2, 1)), iterations=np.zeros((1, 2, 1)),
      converged=np.ones((1, 2, 1), bool))


def test_federated_mechanisms_score_the_global_model():
  out = _output(np.stack([WRONG, WRONG]), RIGHT)
  with jax.enable_x64(True):
    acc, per = feddpdr.evaluate(out, X, Y, config=feddpdr.Config(k=1),
                                num_classes=2)
  np.testing.assert_allclose(acc, [1.0])
  assert per is None


def test_local_mechanisms_score_each_participants_model():
  out = _output(np.stack([RIGHT, WRONG]), WRONG)
  with jax.enable_x64(True):
    acc, per = feddpdr.evaluate(
        out, X, Y, config=feddpdr.Config(k=1, mechanism="dpdr_dpml"),
        num_classes=2)
  np.testing.assert_allclose(per, [[1.0, 0.0]])
  np.testing.assert_allclose(acc, [0.5])
