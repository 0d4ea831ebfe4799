"""Traced programs kept on disk (launch.programs)."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from dpcore import noise
from launch import programs


def _fn(key, xs):
  x, scale = xs
  z = noise.gaussian_noise(key, x.shape, stddev=0.5)
  return (x @ x.T + z[:, :1] * scale, jnp.sum(z))


def _args(rows=3):
  return (jax.random.key(1),
          (jnp.arange(rows * 4, dtype=jnp.float32).reshape(rows, 4),
           jnp.float32(2.0)))


@pytest.fixture(autouse=True)
def _fresh_memo(monkeypatch):
  monkeypatch.setattr(programs, "_LOADED", {})


def test_stored_program_equals_jit_and_skips_tracing(tmp_path, monkeypatch):
  args = _args()
  want = jax.jit(_fn)(*args)
  call = programs.load_or_export(_fn, args, name="toy", settings="s",
                                 cache_dir=str(tmp_path))
  for got, ref in zip(call(*args), want, strict=True):
    np.testing.assert_array_equal(got, ref)
  stored = os.listdir(tmp_path / "programs")
  assert len(stored) == 1 and stored[0].startswith("toy-")

  # A new process (an empty memo) reads the file and never traces _fn.
  monkeypatch.setattr(programs, "_LOADED", {})

  def refuse(*a, **k):
    raise AssertionError("traced again instead of reading the file")

  monkeypatch.setattr(export, "export", refuse)
  again = programs.load_or_export(_fn, args, name="toy", settings="s",
                                  cache_dir=str(tmp_path))
  for got, ref in zip(again(*args), want, strict=True):
    np.testing.assert_array_equal(got, ref)


def test_compiler_options_reach_the_compile(tmp_path):
  args = _args()
  want = jax.jit(_fn)(*args)
  fast = programs.load_or_export(
      _fn, args, name="toy", settings="s", cache_dir=str(tmp_path),
      compiler_options={"xla_backend_optimization_level": 1})
  for got, ref in zip(fast(*args), want, strict=True):
    np.testing.assert_array_equal(got, ref)
  # The same stored trace; the options go to XLA (an unknown one fails).
  assert len(os.listdir(tmp_path / "programs")) == 1
  wrong = programs.load_or_export(
      _fn, args, name="toy", settings="s", cache_dir=str(tmp_path),
      compiler_options={"xla_no_such_option": 1})
  with pytest.raises(Exception, match="xla_no_such_option"):
    wrong(*args)


def test_key_changes_with_shape_settings_and_library(monkeypatch):
  base = programs.program_key("toy", "s", _args())
  assert base == programs.program_key("toy", "s", _args())
  assert base != programs.program_key("toy", "s", _args(rows=5))
  assert base != programs.program_key("toy", "t", _args())
  assert base != programs.program_key("other", "s", _args())
  key, (x, scale) = _args()
  assert base != programs.program_key("toy", "s", (key, (x,), scale))
  assert base != programs.program_key("toy", "s", (key, (x, scale * 1.0j)))
  monkeypatch.setattr(programs, "_library_digest", lambda: "edited")
  assert base != programs.program_key("toy", "s", _args())


def test_unreadable_file_is_set_aside_and_redone(tmp_path, capsys):
  args = _args()
  programs.load_or_export(_fn, args, name="toy", settings="s",
                          cache_dir=str(tmp_path))
  (path,) = (tmp_path / "programs").iterdir()
  path.write_bytes(b"cut off")
  programs._LOADED.clear()
  call = programs.load_or_export(_fn, args, name="toy", settings="s",
                                 cache_dir=str(tmp_path))
  np.testing.assert_array_equal(call(*args)[0], jax.jit(_fn)(*args)[0])
  assert "could not be read" in capsys.readouterr().err
  assert os.path.exists(str(path) + ".bad")
  assert path.read_bytes() != b"cut off"


def test_prune_keeps_the_most_recently_used(tmp_path):
  for i in range(5):
    for name in ("toy", "other"):
      path = tmp_path / f"{name}-{i:032x}.jaxexport"
      path.write_bytes(b"x")
      os.utime(path, (1000.0 + i, 1000.0 + i))
  os.utime(tmp_path / f"toy-{0:032x}.jaxexport", (2000.0, 2000.0))  # used
  deleted = programs.prune(str(tmp_path), "toy", keep=3)
  assert sorted(os.path.basename(p) for p in deleted) == [
      f"toy-{1:032x}.jaxexport", f"toy-{2:032x}.jaxexport"]
  left = sorted(os.listdir(tmp_path))
  assert [p for p in left if p.startswith("toy-")] == [
      f"toy-{i:032x}.jaxexport" for i in (0, 3, 4)]
  assert len([p for p in left if p.startswith("other-")]) == 5


def test_a_load_marks_the_program_used(tmp_path):
  args = _args()
  programs.load_or_export(_fn, args, name="toy", settings="s",
                          cache_dir=str(tmp_path))
  (path,) = (tmp_path / "programs").iterdir()
  os.utime(path, (1000.0, 1000.0))
  programs._LOADED.clear()
  programs.load_or_export(_fn, args, name="toy", settings="s",
                          cache_dir=str(tmp_path))
  assert path.stat().st_mtime > 1000.0
