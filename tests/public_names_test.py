"""Every library module says what is public: ``__all__``, complete and true.

For each module of dpcore, mechanisms and federated: ``__all__`` exists,
every name in it exists, and every public function or class the module
defines is in it (a name left out is either private, with an underscore,
or listed). ``from module import *`` then gives exactly the public API.
"""

import importlib
import inspect
import os
import pkgutil

import pytest

LIBRARY = ("dpcore", "mechanisms", "federated")


def _module_names():
  names = []
  for package in LIBRARY:
    names.append(package)
    root = importlib.import_module(package)
    names.extend(info.name for info in
                 pkgutil.walk_packages(root.__path__, package + "."))
  return sorted(names)


def _missing_and_unknown(module):
  listed = getattr(module, "__all__", None)
  if listed is None:
    return None, None
  defined = {name for name, obj in vars(module).items()
             if not name.startswith("_")
             and (inspect.isfunction(obj) or inspect.isclass(obj))
             and getattr(obj, "__module__", None) == module.__name__}
  missing = sorted(defined - set(listed))
  unknown = sorted(n for n in listed if not hasattr(module, n))
  return missing, unknown


@pytest.mark.parametrize("name", _module_names())
def test_module_lists_its_public_names(name):
  module = importlib.import_module(name)
  missing, unknown = _missing_and_unknown(module)
  assert missing is not None, f"{name} has no __all__"
  assert not missing, f"{name}.__all__ leaves out {missing}"
  assert not unknown, f"{name}.__all__ names what it lacks: {unknown}"
  assert len(set(module.__all__)) == len(module.__all__), "duplicates"


def test_the_check_sees_a_name_left_out():
  import types
  module = types.ModuleType("fake")
  exec("def f():\n  pass\n\ndef g():\n  pass\n__all__ = ['f', 'h']\n",
       module.__dict__)
  for obj in vars(module).values():
    if inspect.isfunction(obj):
      obj.__module__ = "fake"
  assert _missing_and_unknown(module) == (["g"], ["h"])


def test_every_library_module_has_its_mirrored_test_file():
  # tests/ mirrors the library: mechanisms/svm/smo.py is tested in
  # tests/mechanisms/svm/smo_test.py (CONTRIBUTING.md).
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  missing = []
  for name in _module_names():
    module = importlib.import_module(name)
    path = os.path.relpath(module.__file__, root)
    if os.path.basename(path) == "__init__.py":
      continue
    test = os.path.join("tests", path[:-len(".py")] + "_test.py")
    if not os.path.exists(os.path.join(root, test)):
      missing.append(test)
  assert not missing, f"library modules without their test file: {missing}"
