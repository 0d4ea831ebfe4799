"""Tests for launch/formats.py: the raw file-format readers.

Every test writes its own small files in the real formats (or reads the
hand-written fixture in tests/data/).
"""

import gzip
import os
import pickle

import numpy as np
import pytest

from launch.data import formats
from tests.launch.data.files import FIXTURES, cifar_batch, write_idx

# ----------------------------------------------------------------------------
# IDX.


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_round_trip(tmp_path, gz):
  images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
  wide = np.array([[-7, 70000]], dtype=np.int32)  # big-endian multi-byte
  write_idx(tmp_path / "a", images, gz=gz)
  write_idx(tmp_path / "b", wide, gz=gz)
  np.testing.assert_array_equal(formats.read_idx(str(tmp_path / "a")), images)
  np.testing.assert_array_equal(formats.read_idx(str(tmp_path / "b")), wide)


@pytest.mark.parametrize("magic", [[1, 0, 8, 1], [0, 0, 7, 1], [0, 0]])
def test_read_idx_rejects_wrong_magic(tmp_path, magic):
  labels = np.arange(5, dtype=np.uint8)
  write_idx(tmp_path / "bad", labels, magic=bytes(magic))
  with pytest.raises(ValueError, match="magic"):
    formats.read_idx(str(tmp_path / "bad"))


def test_read_idx_rejects_truncation(tmp_path):
  labels = np.arange(5, dtype=np.uint8)
  write_idx(tmp_path / "short", labels)
  raw = (tmp_path / "short").read_bytes()
  (tmp_path / "short").write_bytes(raw[:-1])
  with pytest.raises(ValueError, match="truncated"):
    formats.read_idx(str(tmp_path / "short"))


def test_read_idx_images_checks_the_pair(tmp_path):
  images = np.zeros((4, 2, 3), np.uint8)
  write_idx(tmp_path / "im", images)
  write_idx(tmp_path / "lab", np.arange(4, dtype=np.uint8))
  write_idx(tmp_path / "short", np.arange(3, dtype=np.uint8))
  x, y = formats.read_idx_images(str(tmp_path / "im"), str(tmp_path / "lab"))
  assert x.shape == (4, 2, 3) and y.tolist() == [0, 1, 2, 3]
  with pytest.raises(ValueError, match="expected"):
    formats.read_idx_images(str(tmp_path / "im"), str(tmp_path / "short"))
  with pytest.raises(ValueError, match="expected"):  # labels as images
    formats.read_idx_images(str(tmp_path / "lab"), str(tmp_path / "lab"))


# ----------------------------------------------------------------------------
# CIFAR-10 batches.


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
@pytest.mark.parametrize("gz", [False, True])
def test_cifar_batch_is_read_in_hwc_order(tmp_path, protocol, gz):
  batch = cifar_batch(np.random.default_rng(2), 3)
  with (gzip.open if gz else open)(tmp_path / "b", "wb") as f:
    pickle.dump(batch, f, protocol=protocol)
  x, y = formats.read_cifar_batch(str(tmp_path / "b"))
  assert x.shape == (3, 3072) and x.dtype == np.uint8
  raw = batch[b"data"][1]
  image = x[1].reshape(32, 32, 3)
  i, j = 5, 17
  np.testing.assert_array_equal(
      image[i, j], [raw[i * 32 + j], raw[1024 + i * 32 + j],
                    raw[2048 + i * 32 + j]])
  np.testing.assert_array_equal(y, batch[b"labels"])


class _Evil:

  def __reduce__(self):
    return (os.getcwd, ())


def test_cifar_reader_refuses_code_in_pickles(tmp_path):
  path = tmp_path / "data_batch_1"
  path.write_bytes(pickle.dumps({b"data": _Evil(), b"labels": []}))
  with pytest.raises(pickle.UnpicklingError, match="refusing"):
    formats.read_cifar_batch(str(path))


@pytest.mark.parametrize("batch,match", [
    ([1, 2], "expected a dict"),
    ({b"data": np.zeros((1, 3072), np.uint8)}, "'labels'"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}, "expected"),
])
def test_cifar_reader_rejects_malformed_batches(tmp_path, batch, match):
  (tmp_path / "b").write_bytes(pickle.dumps(batch))
  with pytest.raises(ValueError, match=match):
    formats.read_cifar_batch(str(tmp_path / "b"))


# ----------------------------------------------------------------------------
# svmlight.


def test_svmlight_file_errors_name_the_file(tmp_path):
  empty = tmp_path / "empty.svm"
  empty.write_text("")
  with pytest.raises(ValueError, match=r"empty\.svm: the svmlight file is "
                     r"empty"):
    formats.read_svmlight([str(empty)])
  good = tmp_path / "good.svm"
  good.write_text("1 1:1\n-1 1:2\n")
  bad = tmp_path / "bad.svm"
  bad.write_text("1 1:1\nthis is not svmlight\n")
  with pytest.raises(ValueError, match=r"bad\.svm: not a valid svmlight"):
    formats.read_svmlight([str(good), str(bad)])
  cut = tmp_path / "cut.svm.gz"
  whole = gzip.compress(b"".join(b"%d 1:%d\n" % (i % 2, i)
                                  for i in range(500)))
  cut.write_bytes(whole[:len(whole) // 2])
  with pytest.raises(ValueError, match=r"cut\.svm\.gz: corrupt or truncated "
                     r"gzip"):
    formats.read_svmlight([str(cut)])
  one = tmp_path / "one.svm"
  one.write_text("1 1:1\n1 1:2\n")
  with pytest.raises(ValueError, match=r"one\.svm: .*single label"):
    formats.read_svmlight([str(one)])
  # Compression is told by content, not by name.
  (tmp_path / "zipped").write_bytes(gzip.compress(b"1 1:1\n-1 1:2\n"))
  ((x, y),) = formats.read_svmlight([str(tmp_path / "zipped")])
  np.testing.assert_array_equal(x[:, 0], [1, 2])


def test_corrupt_gzip_idx_names_the_file(tmp_path):
  path = tmp_path / "train-images-idx3-ubyte.gz"
  path.write_bytes(gzip.compress(bytes(range(256)) * 8)[:60])
  with pytest.raises(ValueError, match="train-images-idx3-ubyte.gz: corrupt"):
    formats.read_idx(str(path))


@pytest.mark.parametrize(
    "labels,expected",
    [([1, 2, 2], [-1, 1, 1]), ([0, 1, 0], [-1, 1, -1]),
     ([-1, 1, 1], [-1, 1, 1]), ([1, 3, 5], [0, 1, 2]), ([5, 1, 3], [2, 0, 1])])
def test_svmlight_label_mapping(labels, expected):
  np.testing.assert_array_equal(formats.svmlight_labels(labels), expected)


@pytest.mark.parametrize("labels,match", [([0.5, 1.5], "integers"),
                                          ([3, 3], "single label")])
def test_svmlight_labels_rejects(labels, match):
  with pytest.raises(ValueError, match=match):
    formats.svmlight_labels(labels)


def test_read_svmlight_pair_shares_features_and_mapping(tmp_path):
  (tmp_path / "tr").write_text("2 1:1 2:2\n4 2:-1\n")
  (tmp_path / "te").write_text("4 5:3\n")
  (x_tr, y_tr), (x_te, y_te) = formats.read_svmlight(
      [str(tmp_path / "tr"), str(tmp_path / "te")])
  assert x_tr.shape == (2, 5) and x_te.shape == (1, 5)
  assert x_tr.dtype == np.float64  # the file's precision, as LIBSVM reads it
  np.testing.assert_array_equal(x_tr, [[1, 2, 0, 0, 0], [0, -1, 0, 0, 0]])
  np.testing.assert_array_equal(y_tr, [-1, 1])
  np.testing.assert_array_equal(y_te, [1])  # mapped with the train labels
  np.testing.assert_array_equal(x_te[0], [0, 0, 0, 0, 3])
  ((x, _),) = formats.read_svmlight([str(tmp_path / "tr")], n_features=7)
  assert x.shape == (2, 7)


# ----------------------------------------------------------------------------
# ARFF.


def test_read_arff_fixture():
  x, y, names = formats.read_arff(os.path.join(FIXTURES, "tiny.arff"))
  assert names == ("class a", "b", "c")
  np.testing.assert_array_equal(
      x, [[1.5, -2, 3], [0, 0.25, -1], [-35, 4, 0], [2, 2, 2]])
  np.testing.assert_array_equal(y, [0, 1, 2, 1])


def test_read_arff_gzipped(tmp_path):
  text = ("@relation r\n@attribute x numeric\n@attribute c {u,v}\n@data\n"
          "1,v\n2,u\n")
  with gzip.open(tmp_path / "f.arff.gz", "wt") as f:
    f.write(text)
  x, y, names = formats.read_arff(str(tmp_path / "f.arff.gz"))
  assert x.tolist() == [[1.0], [2.0]] and y.tolist() == [1, 0]
  assert names == ("u", "v")


@pytest.mark.parametrize("header,row,match", [
    ("@attribute c {a,b}", "{0 1, 1 a}", "sparse"),
    ("@attribute c {a,b}", "?,a", "missing"),
    ("@attribute c {a,b}", "1,z", "not one of"),
    ("@attribute c {a,b}", "1", "expected 2"),
    ("@attribute c {a,b}", "1,'a", "unbalanced"),
    ("@attribute c {a,b", "1,a", "unterminated"),
    ("@attribute c string", "1,a", "type"),
    ("@attribute c numeric", "1,2", "nominal class"),
])
def test_read_arff_rejects_unsupported(tmp_path, header, row, match):
  text = f"@relation r\n@attribute x numeric\n{header}\n@data\n{row}\n"
  (tmp_path / "f.arff").write_text(text)
  with pytest.raises(ValueError, match=match):
    formats.read_arff(str(tmp_path / "f.arff"))


def test_read_arff_rejects_nominal_feature(tmp_path):
  text = "@relation r\n@attribute x {u,v}\n@attribute c {a,b}\n@data\nu,a\n"
  (tmp_path / "f.arff").write_text(text)
  with pytest.raises(ValueError, match="nominal feature"):
    formats.read_arff(str(tmp_path / "f.arff"))


# ----------------------------------------------------------------------------
# HAR.


def test_read_har_split(tmp_path):
  x = np.random.default_rng(3).uniform(-1, 1, (3, 4))
  np.savetxt(tmp_path / "X.txt", x, fmt="%.7e")
  np.savetxt(tmp_path / "y.txt", [1, 6, 2], fmt="%d")
  got_x, got_y = formats.read_har_split(str(tmp_path / "X.txt"),
                                        str(tmp_path / "y.txt"))
  np.testing.assert_allclose(got_x, x, rtol=1e-6)  # 8 significant digits
  np.testing.assert_array_equal(got_y, [0, 5, 1])


@pytest.mark.parametrize("labels", [[1, 7], [0, 2], [1.5, 2]])
def test_read_har_split_rejects_bad_labels(tmp_path, labels):
  np.savetxt(tmp_path / "X.txt", np.zeros((2, 3)))
  np.savetxt(tmp_path / "y.txt", labels)
  with pytest.raises(ValueError, match="1..6"):
    formats.read_har_split(str(tmp_path / "X.txt"), str(tmp_path / "y.txt"))


# ----------------------------------------------------------------------------
# Inputs that used to be read silently wrong, or failed without naming the
# file.


def _raw_idx(path, code, dims, payload=b""):
  header = bytes([0, 0, code, len(dims)])
  path.write_bytes(header + b"".join(d.to_bytes(4, "big") for d in dims)
                   + payload)


def test_idx_header_and_sizes_are_checked_before_reading(tmp_path):
  (tmp_path / "rank").write_bytes(bytes([0, 0, 8, 200]) + bytes(4))
  with pytest.raises(ValueError, match=r"rank: .*200 dimensions.*truncated"):
    formats.read_idx(str(tmp_path / "rank"))
  _raw_idx(tmp_path / "huge", 0x08, [65536] * 4)  # 2⁶⁴ values: no overflow
  with pytest.raises(ValueError, match=r"huge: header announces"):
    formats.read_idx(str(tmp_path / "huge"))


def test_idx_images_must_be_bytes_and_labels_integers(tmp_path):
  write_idx(tmp_path / "labels", np.arange(2, dtype=np.uint8))
  write_idx(tmp_path / "wide", np.full((2, 2, 2), 300, np.int32))
  with pytest.raises(ValueError, match=r"wide stores int32 pixels"):
    formats.read_idx_images(str(tmp_path / "wide"), str(tmp_path / "labels"))
  write_idx(tmp_path / "images", np.zeros((2, 2, 2), np.uint8))
  _raw_idx(tmp_path / "float_labels", 0x0D, [2],
           np.array([0.9, 1.7], ">f4").tobytes())
  with pytest.raises(ValueError, match=r"float_labels stores float32"):
    formats.read_idx_images(str(tmp_path / "images"),
                            str(tmp_path / "float_labels"))
  write_idx(tmp_path / "none", np.zeros((0, 2, 2), np.uint8))
  write_idx(tmp_path / "no_labels", np.zeros(0, np.uint8))
  with pytest.raises(ValueError, match=r"none holds no images"):
    formats.read_idx_images(str(tmp_path / "none"),
                            str(tmp_path / "no_labels"))


@pytest.mark.parametrize("data,labels,match", [
    (np.full((1, 3072), 300, np.int16), [1], "stored as int16"),
    (np.zeros((1, 3072), np.float32), [1], "stored as float32"),
    (np.zeros((2, 3072), np.uint8), [57, -1], "0..9"),
])
def test_cifar_pixels_must_be_bytes_and_labels_class_ids(tmp_path, data,
                                                         labels, match):
  (tmp_path / "b").write_bytes(pickle.dumps({b"data": data,
                                             b"labels": labels}))
  with pytest.raises(ValueError, match=match):
    formats.read_cifar_batch(str(tmp_path / "b"))


def test_an_unreadable_cifar_batch_is_named(tmp_path):
  whole = pickle.dumps(cifar_batch(np.random.default_rng(0), 2))
  (tmp_path / "cut").write_bytes(whole[:len(whole) // 2])
  (tmp_path / "text").write_bytes(b"not a pickle at all" * 10)
  for name in ("cut", "text"):
    with pytest.raises(ValueError, match=rf"{name}: not a readable CIFAR"):
      formats.read_cifar_batch(str(tmp_path / name))


def test_svmlight_indices_start_at_one_and_values_are_finite(tmp_path):
  (tmp_path / "zero").write_text("1 0:5 1:7\n-1 0:6 1:8\n")
  with pytest.raises(ValueError, match=r"zero: .*index 0.*start at 1"):
    formats.read_svmlight([str(tmp_path / "zero")])
  # A 0-based test file does not shift the training file's columns.
  (tmp_path / "tr").write_text("1 1:5 2:7\n-1 1:6 2:8\n")
  (tmp_path / "te").write_text("1 0:1\n")
  with pytest.raises(ValueError, match=r"te: .*index 0"):
    formats.read_svmlight([str(tmp_path / "tr"), str(tmp_path / "te")])
  (tmp_path / "nan").write_text("1 1:nan 2:inf\n-1 1:-inf\n")
  with pytest.raises(ValueError, match=r"nan: a feature value is not finite"):
    formats.read_svmlight([str(tmp_path / "nan")])


def test_a_test_label_unseen_in_training_is_refused(tmp_path):
  (tmp_path / "tr").write_text("1 1:1\n-1 1:2\n")
  (tmp_path / "te").write_text("3 1:1\n")
  with pytest.raises(ValueError, match=r"te: label\(s\) \[3\.0\] do not "
                     r"occur in .*tr"):
    formats.read_svmlight([str(tmp_path / "tr"), str(tmp_path / "te")])


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "1_0", "0x10", ""])
def test_arff_values_must_be_finite_numbers(tmp_path, value):
  text = (f"@relation r\n@attribute x numeric\n@attribute c {{a,b}}\n"
          f"@data\n1,a\n{value},b\n")
  (tmp_path / "f.arff").write_text(text)
  with pytest.raises(ValueError, match=r"f\.arff:6: .*not a finite number"):
    formats.read_arff(str(tmp_path / "f.arff"))


@pytest.mark.parametrize("text,match", [
    ("@relation r\n@attribute x numeric\n@attribute c {a,b}\n@data\n",
     "no data rows"),
    ("@relation r\n@attribute x numeric\n@attribute c {a,b}\n",
     "no data rows"),
    ("@relation r\n@attribute x numeric\n@attribute c {a,b,a}\n@data\n1,a\n",
     "repeats a value"),
])
def test_degenerate_arff_files_are_refused(tmp_path, text, match):
  (tmp_path / "f.arff").write_text(text)
  with pytest.raises(ValueError, match=match):
    formats.read_arff(str(tmp_path / "f.arff"))


def test_arff_encoding(tmp_path):
  text = "@relation r\n@attribute x numeric\n@attribute c {a,b}\n@data\n1,b\n"
  (tmp_path / "bom.arff").write_bytes(b"\xef\xbb\xbf" + text.encode())
  x, y, _ = formats.read_arff(str(tmp_path / "bom.arff"))
  assert x.tolist() == [[1.0]] and y.tolist() == [1]
  (tmp_path / "latin.arff").write_bytes(
      text.replace("@relation r", "@relation caf\xe9").encode("latin-1"))
  with pytest.raises(ValueError, match=r"latin\.arff: not UTF-8"):
    formats.read_arff(str(tmp_path / "latin.arff"))


def test_har_features_must_be_finite(tmp_path):
  (tmp_path / "X.txt").write_text("0.5 nan\n0.1 0.2\n")
  np.savetxt(tmp_path / "y.txt", [1, 2], fmt="%d")
  with pytest.raises(ValueError, match=r"X\.txt: a feature value is not"):
    formats.read_har_split(str(tmp_path / "X.txt"), str(tmp_path / "y.txt"))
