"""Readers for the raw file formats behind ``launch.data.loaders``' sets.

Each reader takes a path (or paths), checks the file against its format and
returns NumPy arrays; none of them knows where data sets live or what they
are called (that is ``launch.data.loaders``'s job). Every reader accepts gzipped
files as well as plain ones.

* IDX (MNIST, Fashion-MNIST): :func:`read_idx`, :func:`read_idx_images`.
* CIFAR-10 python batches: :func:`read_cifar_batch`, which unpickles plain
  data and NumPy arrays only.
* LIBSVM / svmlight: :func:`read_svmlight` and its label map
  :func:`svmlight_labels`.
* ARFF (WEKA), dense, numeric features and a nominal class:
  :func:`read_arff`.
* UCI HAR text files: :func:`read_har_split`.
"""

from __future__ import annotations

import bz2
import gzip
import io
import math
import pickle
import re
import zlib

import numpy as np


def _read_bytes(path: str) -> bytes:
  """The whole content of ``path``, decompressed when gzip or bzip2.

  Compression is recognised by the file's magic bytes, not its name.

  Raises:
    ValueError: a compressed file is corrupt or truncated (naming it).
  """
  with open(path, "rb") as f:
    raw = f.read()
  try:
    if raw[:2] == b"\x1f\x8b":
      return gzip.decompress(raw)
    if raw[:3] == b"BZh":
      return bz2.decompress(raw)
  except (OSError, EOFError, zlib.error, ValueError) as e:
    kind = "gzip" if raw[:2] == b"\x1f\x8b" else "bzip2"
    raise ValueError(f"{path}: corrupt or truncated {kind} file ({e}); "
                     f"download or decompress it again.") from None
  return raw


def _open_maybe_gzip(path: str):
  """``path``'s content (decompressed) as a binary file object."""
  return io.BytesIO(_read_bytes(path))


# ----------------------------------------------------------------------------
# IDX.

_IDX_TYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
              0x0E: ">f8"}


def read_idx(path: str) -> np.ndarray:
  """Reads one IDX file (gzipped or not) into an array of its stored type.

  The format: two zero bytes, a type code, the number of dimensions, then
  each dimension as a big-endian uint32, then the values row-major.

  Raises:
    ValueError: when the magic number or the length is wrong.
  """
  with _open_maybe_gzip(path) as f:
    raw = f.read()
  if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
    raise ValueError(
        f"{path} is not an IDX file: its magic number is {raw[:4].hex()!r}, "
        f"expected 0000 then a type code in "
        f"{sorted(hex(t) for t in _IDX_TYPES)} and the rank.")
  ndim = raw[3]
  header = 4 + 4 * ndim
  if len(raw) < header:
    raise ValueError(f"{path}: the IDX header announces {ndim} dimensions "
                     f"but the file ends after {len(raw)} bytes; the file is "
                     f"truncated or corrupt.")
  dims = tuple(int(v) for v in np.frombuffer(raw, ">u4", ndim, offset=4))
  dtype = np.dtype(_IDX_TYPES[raw[2]])
  if len(raw) - header != math.prod(dims) * dtype.itemsize:
    raise ValueError(
        f"{path}: header announces shape {dims} of {dtype} but the file holds "
        f"{len(raw) - header} bytes of data; the file is truncated or "
        f"corrupt.")
  return np.frombuffer(raw, dtype, offset=header).reshape(dims).astype(
      dtype.newbyteorder("="))


def read_idx_images(images_path: str,
                    labels_path: str) -> tuple[np.ndarray, np.ndarray]:
  """An IDX image file and its label file -> ``(n, rows, cols)``, ``(n,)``.

  The images must be stored as unsigned bytes (type code 0x08), so that
  the pixel bounds (0, 255) the loaders state hold by the file's type, and
  the labels as integers.

  Raises:
    ValueError: when the shapes do not describe ``n`` ≥ 1 images and ``n``
      labels, the types are not bytes and integers (or a file is not IDX).
  """
  images, labels = read_idx(images_path), read_idx(labels_path)
  if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
    raise ValueError(
        f"{images_path} has shape {images.shape} and {labels_path} "
        f"{labels.shape}; expected (n, rows, cols) images and n labels.")
  if len(images) == 0:
    raise ValueError(f"{images_path} holds no images.")
  if images.dtype != np.uint8:
    raise ValueError(f"{images_path} stores {images.dtype} pixels; image "
                     f"sets are 8-bit (IDX type code 0x08), whose bounds "
                     f"(0, 255) the privacy code relies on.")
  if labels.dtype.kind not in "iu":
    raise ValueError(f"{labels_path} stores {labels.dtype} labels; expected "
                     f"integer class ids.")
  return images, labels


# ----------------------------------------------------------------------------
# CIFAR-10 python batches.

_PICKLE_ALLOWED = {
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"), ("_codecs", "encode"),
}


class _Refused(pickle.UnpicklingError):
  """A pickle that asks for more than plain data and NumPy arrays."""


class _BatchUnpickler(pickle.Unpickler):
  """Unpickles plain data and NumPy arrays only: no arbitrary code."""

  def find_class(self, module, name):
    if (module, name) not in _PICKLE_ALLOWED:
      raise _Refused(
          f"refusing to load {module}.{name} from a CIFAR batch: the file is "
          f"not a plain CIFAR-10 python batch.")
    return super().find_class(module, name)


def read_cifar_batch(path: str) -> tuple[np.ndarray, np.ndarray]:
  """One CIFAR-10 python batch -> (n, 3072) HWC uint8 images, (n,) labels.

  The batch stores each image as 1024 red, 1024 green then 1024 blue bytes
  (CHW); we return HWC order to match the other image sets. The pixels must
  be stored as bytes (their bounds (0, 255) hold by type) and the labels
  be class ids 0..9.

  Raises:
    pickle.UnpicklingError: the pickle asks for anything but plain data and
      NumPy arrays (a CIFAR batch never does; code could run otherwise).
    ValueError: the file is not a readable pickle, or the batch lacks
      ``data``/``labels``, has the wrong shapes, types or label values.
  """
  with _open_maybe_gzip(path) as f:
    try:
      batch = _BatchUnpickler(io.BytesIO(f.read()), encoding="bytes").load()
    except _Refused as e:
      raise _Refused(f"{path}: {e}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError,
            AttributeError, IndexError, KeyError, UnicodeDecodeError) as e:
      raise ValueError(f"{path}: not a readable CIFAR-10 python batch "
                       f"({type(e).__name__}: {e}).") from None
  if not isinstance(batch, dict):
    raise ValueError(f"{path}: expected a dict, got {type(batch).__name__}.")
  batch = {k.decode() if isinstance(k, bytes) else k: v
           for k, v in batch.items()}
  if "data" not in batch or "labels" not in batch:
    raise ValueError(f"{path}: a CIFAR-10 batch has keys 'data' and "
                     f"'labels', found {sorted(batch)}.")
  pixels, labels = np.asarray(batch["data"]), np.asarray(batch["labels"])
  if pixels.ndim != 2 or pixels.shape[1] != 3072 or len(pixels) != len(labels):
    raise ValueError(f"{path}: data {pixels.shape} / labels {labels.shape}; "
                     f"expected (n, 3072) and (n,).")
  if pixels.dtype != np.uint8:
    raise ValueError(f"{path}: data stored as {pixels.dtype}; a CIFAR-10 "
                     f"batch holds uint8 pixels, whose bounds (0, 255) the "
                     f"privacy code relies on.")
  if (labels.dtype.kind not in "iu" or not len(labels)
      or labels.min() < 0 or labels.max() > 9):
    raise ValueError(f"{path}: labels must be class ids 0..9 (and the batch "
                     f"not empty).")
  labels = labels.astype(np.int64)
  hwc = pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
  return hwc.reshape(len(pixels), -1), labels


# ----------------------------------------------------------------------------
# LIBSVM / svmlight.


def svmlight_labels(y: np.ndarray) -> np.ndarray:
  """Maps svmlight labels: two values -> ±1 (larger -> +1), else 0..K-1."""
  y = np.asarray(y, np.float64)
  if not np.all(np.isfinite(y)) or not np.array_equal(y, np.round(y)):
    raise ValueError("svmlight labels must be integers (class ids); "
                     "regression targets are not supported here.")
  values = np.unique(y)
  if len(values) < 2:
    raise ValueError(f"svmlight file has a single label {values.tolist()}; "
                     f"at least two classes are needed.")
  if len(values) == 2:
    return np.where(y == values[1], 1, -1).astype(np.int64)
  return np.searchsorted(values, y).astype(np.int64)


def read_svmlight(paths, *, n_features: int | None = None
                  ) -> list[tuple[np.ndarray, np.ndarray]]:
  """Reads svmlight files that share one feature space and one label map.

  Args:
    paths: the files (e.g. train and test), plain, gzip or bzip2 (told by
      their magic bytes).
    n_features: the number of features, when the files may not mention the
      last one; by default the largest index found in any file.

  Returns:
    One ``(x, y)`` per file: dense float64 ``(n, d)`` features, the file's
    values as LIBSVM reads them (mind the memory of wide sparse sets such as
    rcv1), and int64 labels mapped by :func:`svmlight_labels` over all the
    files together. Indices start at 1, as LIBSVM's do.

  Raises:
    ValueError: a file is empty, corrupt or malformed (the message names
      it: an index 0, a value that is not finite), a later file has a label
      the first one lacks, or the labels are not class ids of at least two
      classes.
  """
  from sklearn.datasets import (  # pylint: disable=g-import-not-at-top
      load_svmlight_file,
      load_svmlight_files,
  )

  paths = list(paths)
  contents = [_read_bytes(p) for p in paths]
  for path, content in zip(paths, contents, strict=True):
    if not content.strip():
      raise ValueError(f"{path}: the svmlight file is empty (no rows).")
  try:
    parts = load_svmlight_files([io.BytesIO(c) for c in contents],
                                n_features=n_features, dtype=np.float64,
                                zero_based=False)
  except ValueError as e:
    for path, content in zip(paths, contents, strict=True):
      try:
        load_svmlight_file(io.BytesIO(content), dtype=np.float64,
                           zero_based=False)
      except ValueError as own:
        hint = ("; LIBSVM's indices start at 1 (scikit-learn's "
                "dump_svmlight_file writes from 0 unless zero_based=False)"
                if "index 0" in str(own) else "")
        raise ValueError(f"{path}: not a valid svmlight/LIBSVM file "
                         f"({own}){hint}.") from None
    raise ValueError(f"{', '.join(paths)}: {e}") from None
  xs = [np.asarray(m.toarray(), np.float64) for m in parts[0::2]]
  ys = parts[1::2]
  for path, x, y in zip(paths, xs, ys, strict=True):
    if len(y) == 0:
      raise ValueError(f"{path}: the svmlight file holds no rows.")
    if not np.all(np.isfinite(x)):
      raise ValueError(f"{path}: a feature value is not finite (nan or "
                       f"inf).")
    unseen = sorted(set(np.unique(y).tolist()) - set(np.unique(ys[0]).tolist()))
    if unseen:
      raise ValueError(f"{path}: label(s) {unseen} do not occur in "
                       f"{paths[0]}; the files must share one label set.")
  try:
    labels = svmlight_labels(np.concatenate(ys))
  except ValueError as e:
    raise ValueError(f"{', '.join(paths)}: {e}") from None
  ys = np.split(labels, np.cumsum([len(y) for y in ys])[:-1])
  return list(zip(xs, ys, strict=True))


# ----------------------------------------------------------------------------
# ARFF (WEKA).


def _split_arff(text: str) -> list[str]:
  """Splits a comma-separated ARFF line, honouring '...' and "..." quotes."""
  values, current, quote, i = [], [], None, 0
  while i < len(text):
    ch = text[i]
    if quote:
      if ch == "\\" and i + 1 < len(text):
        current.append(text[i + 1])
        i += 1
      elif ch == quote:
        quote = None
      else:
        current.append(ch)
    elif ch in "'\"":
      quote = ch
    elif ch == ",":
      values.append("".join(current).strip())
      current = []
    else:
      current.append(ch)
    i += 1
  if quote:
    raise ValueError(f"unbalanced quote in ARFF line {text!r}")
  values.append("".join(current).strip())
  return values


_ATTRIBUTE = re.compile(
    r"""@attribute\s+('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\S+)\s+(.+)$""",
    re.IGNORECASE)
_NUMERIC = {"numeric", "real", "integer"}
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _arff_attribute(line: str, where: str):
  """``@attribute`` line -> ``(name, None)`` if numeric, else its values."""
  match = _ATTRIBUTE.match(line)
  if match is None:
    raise ValueError(f"{where}: cannot parse {line!r}.")
  name = match.group(1).strip("'\"")
  kind = match.group(2).strip()
  if kind.startswith("{"):
    if not kind.endswith("}"):
      raise ValueError(f"{where}: unterminated nominal set {kind!r}.")
    values = tuple(_split_arff(kind[1:-1]))
    if len(set(values)) != len(values):
      raise ValueError(f"{where}: nominal set {kind!r} repeats a value.")
    return name, values
  if kind.lower() in _NUMERIC:
    return name, None
  raise ValueError(f"{where}: attribute {name!r} has type {kind!r}; only "
                   f"numeric features and a nominal class are supported.")


def read_arff(path: str) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
  """Reads a dense ARFF file: numeric attributes, nominal class last.

  Lines starting with ``%`` are comments; attribute names may be quoted.
  Sparse rows (``{index value, ...}``), missing values (``?``), string/date
  attributes and nominal attributes other than the class are rejected.

  Returns:
    ``(x, y, class_names)``: float64 ``(n, d)`` features, int64 labels that
    index ``class_names`` (the nominal values in their declared order).
  """
  return _parse_arff(path)[:3]


def read_arffs(paths) -> list[tuple[np.ndarray, np.ndarray]]:
  """ARFF files of one data set (e.g. train and test): ``(x, y)`` per file.

  Each file as :func:`read_arff` reads it; the files must declare the same
  attributes, by name and in order, and the same class values, so that a
  column or a label means the same in each.

  Raises:
    ValueError: a file :func:`read_arff` refuses, or two files whose
      attributes or classes differ (naming both).
  """
  paths = list(paths)
  parsed = [_parse_arff(p) for p in paths]
  for path, (_, _, classes, names) in zip(paths[1:], parsed[1:],
                                          strict=True):
    if names != parsed[0][3]:
      raise ValueError(f"{path} declares the attributes {list(names)}, "
                       f"{paths[0]} {list(parsed[0][3])}; the files must "
                       f"share them, in the same order.")
    if classes != parsed[0][2]:
      raise ValueError(f"{path} declares the class values {classes}, "
                       f"{paths[0]} {parsed[0][2]}; the files must share "
                       f"them.")
  return [(x, y) for x, y, _, _ in parsed]


def _parse_arff(path: str):
  """``(x, y, class_names, feature_names)`` of an ARFF file."""
  attributes, rows, in_data = [], [], False
  try:
    lines = _read_bytes(path).decode("utf-8-sig").splitlines()
  except UnicodeDecodeError as e:
    raise ValueError(f"{path}: not UTF-8 text ({e}).") from None
  for number, line in enumerate(lines, 1):
    line = line.strip()
    if not line or line.startswith("%"):
      continue
    where = f"{path}:{number}"
    if in_data:
      if line.startswith("{"):
        raise ValueError(f"{where}: sparse ARFF rows are not supported; "
                         f"write the file densely.")
      rows.append((where, _split_arff(line)))
      continue
    keyword = line.split(None, 1)[0].lower()
    if keyword == "@attribute":
      attributes.append(_arff_attribute(line, where))
    elif keyword == "@data":
      in_data = True
    elif keyword != "@relation":
      raise ValueError(f"{where}: unexpected header line {line!r}.")
  if not attributes or attributes[-1][1] is None:
    raise ValueError(f"{path}: the last attribute must be the nominal class.")
  nominal = [a for a, values in attributes[:-1] if values is not None]
  if nominal:
    raise ValueError(f"{path}: nominal feature(s) {nominal} are not supported;"
                     f" encode them numerically first.")
  if not rows:
    raise ValueError(f"{path}: the ARFF file holds no data rows.")
  class_names = attributes[-1][1]
  index = {v: i for i, v in enumerate(class_names)}
  x = np.empty((len(rows), len(attributes) - 1), np.float64)
  y = np.empty(len(rows), np.int64)
  for r, (where, values) in enumerate(rows):
    if len(values) != len(attributes):
      raise ValueError(f"{where}: {len(values)} values, expected "
                       f"{len(attributes)}.")
    if "?" in values:
      raise ValueError(f"{where}: missing values ('?') are not supported.")
    if values[-1] not in index:
      raise ValueError(f"{where}: class {values[-1]!r} is not one of "
                       f"{class_names}.")
    bad = [v for v in values[:-1] if not _NUMBER.match(v)]
    if bad:
      raise ValueError(f"{where}: {bad[0]!r} is not a finite number.")
    x[r] = [float(v) for v in values[:-1]]
    y[r] = index[values[-1]]
  return x, y, class_names, tuple(a for a, _ in attributes[:-1])


# ----------------------------------------------------------------------------
# UCI HAR.


def read_har_split(x_path: str,
                   y_path: str) -> tuple[np.ndarray, np.ndarray]:
  """One HAR split (``X_*.txt``, ``y_*.txt``) -> float64 features, labels.

  The text files hold one whitespace-separated row per window and one
  activity id 1..6 per line; the ids are returned as 0..5.

  Raises:
    ValueError: a label is not an integer in 1..6.
  """
  try:
    x = np.loadtxt(io.BytesIO(_read_bytes(x_path)), dtype=np.float64,
                   ndmin=2)
  except ValueError as e:
    raise ValueError(f"{x_path}: not a HAR feature file ({e}).") from None
  try:
    y = np.loadtxt(io.BytesIO(_read_bytes(y_path)), dtype=np.float64,
                   ndmin=1)
  except ValueError as e:
    raise ValueError(f"{y_path}: not a HAR label file ({e}).") from None
  if not np.all(np.isfinite(x)):
    raise ValueError(f"{x_path}: a feature value is not finite (nan or inf).")
  if len(y) == 0 or len(y) != len(x):
    raise ValueError(f"{x_path} has {len(x)} rows and {y_path} {len(y)} "
                     f"labels; expected the same, non-zero number.")
  if (y != np.round(y)).any() or y.min() < 1 or y.max() > 6:
    raise ValueError(f"{y_path}: HAR labels must be integers 1..6.")
  return x, y.astype(np.int64) - 1
