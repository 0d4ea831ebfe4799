"""Tests of federated.feddpdr.keys: every participant's keys, the server's."""

import jax
import numpy as np

from federated import feddpdr


def _data(keys):
  return np.asarray(jax.random.key_data(keys))


def test_participant_keys_depend_on_the_index_alone():
  key = jax.random.key(7)
  pca, fit = feddpdr.participant_keys(key, 5)
  # A block of participants 2..4 (another process, chunk or bucket) gets
  # the same keys as in the whole run.
  pca_tail, fit_tail = feddpdr.participant_keys(key, 3, first=2)
  np.testing.assert_array_equal(_data(pca_tail), _data(pca)[2:])
  np.testing.assert_array_equal(_data(fit_tail), _data(fit)[2:])
  # Ten distinct keys: no two draws share one.
  flat = np.concatenate([_data(pca), _data(fit)]).reshape(10, -1)
  assert len({tuple(row) for row in flat}) == 10


def test_the_server_stream_is_no_participants():
  key = jax.random.key(7)
  server = _data(feddpdr.server_key(key))
  pca, fit = feddpdr.participant_keys(key, 4)
  assert not any(np.array_equal(server, k)
                 for k in np.concatenate([_data(pca), _data(fit)]))
  assert feddpdr.SERVER_STREAM == 2**32 - 1
