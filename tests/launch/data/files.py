"""Writers of small files in the real data formats, shared by the tests.

Not a test module: ``formats_test``, ``data_test`` and ``feddpdr_test``
import these to build their own inputs (nothing is downloaded).
"""

import gzip
import os
import pickle
import struct

import numpy as np

FIXTURES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "data")
_IDX_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int32): 0x0C}


def write_idx(path, array, *, gz=False, magic=None):
  """Writes ``array`` as an IDX file; ``magic`` overrides the first bytes."""
  array = np.asarray(array)
  code = _IDX_CODES[array.dtype]
  header = magic if magic is not None else bytes([0, 0, code, array.ndim])
  header += struct.pack(">" + "I" * array.ndim, *array.shape)
  payload = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
  with (gzip.open if gz else open)(path, "wb") as f:
    f.write(payload)


def cifar_batch(rng, n):
  """A CIFAR-10 python batch dict of ``n`` random images."""
  return {b"batch_label": b"x", b"labels": rng.integers(0, 10, n).tolist(),
          b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
          b"filenames": [b"f"] * n}


def write_cifar_dir(root, rng, *, per_batch, gz_batch="data_batch_3"):
  """A ``cifar-10-batches-py`` directory under ``root`` of random images.

  Returns the batch dicts by file stem (five training batches and
  ``test_batch``); ``gz_batch`` is written gzipped (both are accepted).
  """
  directory = os.path.join(str(root), "cifar10", "cifar-10-batches-py")
  os.makedirs(directory)
  batches = {}
  for stem in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
    batches[stem] = cifar_batch(rng, per_batch)
    gz = stem == gz_batch
    with (gzip.open if gz else open)(
        os.path.join(directory, stem + ".gz" * gz), "wb") as f:
      pickle.dump(batches[stem], f, protocol=2)
  return batches
