"""Small classification problems for the FedDPDR tests."""

import numpy as np


def blobs(n, d, classes, seed):
  """Unit rows around well separated class directions."""
  rng = np.random.default_rng(seed)
  centres = np.linalg.qr(rng.normal(size=(d, classes)))[0].T
  labels = rng.integers(0, classes, n)
  x = centres[labels] + 0.15 * rng.normal(size=(n, d))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return x.astype(np.float32), labels
