"""dpcore.lazy: sub-modules and exports imported on first use."""

import sys

import pytest

from dpcore import lazy


@pytest.fixture
def package(tmp_path, monkeypatch):
  root = tmp_path / "lazypkg"
  root.mkdir()
  (root / "__init__.py").write_text(
      "from dpcore import lazy\n"
      "__getattr__, __dir__, __all__ = lazy.attach(\n"
      "    __name__, ('heavy', 'light'), {'VALUE': 'heavy'})\n")
  (root / "heavy.py").write_text("VALUE = 42\n")
  (root / "light.py").write_text("NAME = 'light'\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  yield "lazypkg"
  for name in [m for m in sys.modules if m.split(".")[0] == "lazypkg"]:
    del sys.modules[name]


def test_a_submodule_is_imported_on_first_use_only(package):
  import lazypkg  # pylint: disable=import-outside-toplevel
  assert "lazypkg.heavy" not in sys.modules
  assert "lazypkg.light" not in sys.modules
  assert lazypkg.light.NAME == "light"
  assert "lazypkg.light" in sys.modules
  assert "lazypkg.heavy" not in sys.modules


def test_an_export_is_read_from_its_submodule_and_kept(package):
  import lazypkg  # pylint: disable=import-outside-toplevel
  assert lazypkg.VALUE == 42
  assert "lazypkg.heavy" in sys.modules
  assert vars(lazypkg)["VALUE"] == 42  # cached: no second lookup


def test_unknown_names_raise_attribute_error_and_dir_lists_the_rest(package):
  import lazypkg  # pylint: disable=import-outside-toplevel
  with pytest.raises(AttributeError, match="has no attribute 'missing'"):
    _ = lazypkg.missing
  assert {"heavy", "light", "VALUE"} <= set(dir(lazypkg))
  assert lazypkg.__all__ == ["VALUE", "heavy", "light"]


def test_attach_returns_the_sorted_public_names():
  _, _, names = lazy.attach("x", ("b", "a"), {"C": "a"})
  assert names == ["C", "a", "b"]
