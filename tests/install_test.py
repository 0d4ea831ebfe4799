"""The lean install: the library needs only its declared runtime packages.

``pip install dpjax`` installs jax, optax, numpy, scipy, dp-accounting and
absl-py; the launch scripts' packages (TFDS, scikit-learn, matplotlib,
flatbuffers) come with the ``launch`` extra. These tests hold the library
(dpcore, mechanisms, federated) to that: its imports, read from the
source, name only the declared packages, and every module imports in a
fresh interpreter where the extra's packages cannot be found.
"""

import ast
import pathlib
import re
import subprocess
import sys
import textwrap
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIBRARY = ("dpcore", "mechanisms", "federated")
# Import name of each runtime dependency (distribution name → module).
RUNTIME = {"jax": "jax", "jaxlib": "jaxlib", "optax": "optax",
           "numpy": "numpy", "scipy": "scipy",
           "dp-accounting": "dp_accounting", "absl-py": "absl"}
# What the launch extra brings, blocked in the subprocess below.
LAUNCH_ONLY = ("sklearn", "tensorflow_datasets", "tensorflow", "matplotlib",
               "flatbuffers", "importlib_resources", "skimage", "libsvm")


def _requirement_name(spec: str) -> str:
  return re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].strip().lower()


def _pyproject():
  with open(ROOT / "pyproject.toml", "rb") as f:
    return tomllib.load(f)


def test_runtime_dependencies_are_the_library_imports():
  declared = {_requirement_name(s) for s in _pyproject()["project"][
      "dependencies"]}
  assert declared == set(RUNTIME)


def test_launch_extra_holds_the_scripts_packages():
  extras = _pyproject()["project"]["optional-dependencies"]
  launch = {_requirement_name(s) for s in extras["launch"]}
  assert {"tensorflow-datasets", "scikit-learn", "matplotlib",
          "flatbuffers"} <= launch
  assert "dpjax" in {_requirement_name(s) for s in extras["test"]}


def _third_party_imports(path: pathlib.Path) -> set[str]:
  tree = ast.parse(path.read_text(encoding="utf-8"))
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update(a.name.split(".")[0] for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0:
      names.add(node.module.split(".")[0])
  return {n for n in names
          if n not in sys.stdlib_module_names and n not in LIBRARY}


def test_library_source_imports_only_runtime_packages():
  allowed = set(RUNTIME.values())
  found = {}
  for package in LIBRARY:
    for path in sorted((ROOT / package).rglob("*.py")):
      extra = _third_party_imports(path) - allowed
      if extra:
        found[str(path.relative_to(ROOT))] = sorted(extra)
  assert not found, f"library modules import undeclared packages: {found}"


def test_import_check_sees_a_forbidden_import(tmp_path):
  # The source check must be able to fail: a module importing sklearn
  # inside a function is caught.
  bad = tmp_path / "bad.py"
  bad.write_text("def f():\n  import sklearn.metrics\n  return 1\n")
  assert _third_party_imports(bad) == {"sklearn"}


_BLOCKED_IMPORT = textwrap.dedent("""
    import importlib, pkgutil, sys

    BLOCKED = {blocked!r}

    class Block:
      def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
          raise ModuleNotFoundError(f"blocked for the test: {{name}}")
        return None

    sys.meta_path.insert(0, Block())
    count = 0
    for package in {library!r}:
      root = importlib.import_module(package)
      count += 1
      for info in pkgutil.walk_packages(root.__path__, package + "."):
        importlib.import_module(info.name)
        count += 1
    leaked = sorted(m for m in BLOCKED if m in sys.modules)
    assert not leaked, leaked
    print(count)
    """)


def _run_blocked(blocked, library=LIBRARY):
  code = _BLOCKED_IMPORT.format(blocked=tuple(blocked), library=library)
  return subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                        capture_output=True, text=True, timeout=600,
                        env={"JAX_PLATFORMS": "cpu", "PATH": ""})


def test_every_library_module_imports_without_the_launch_extra():
  result = _run_blocked(LAUNCH_ONLY)
  assert result.returncode == 0, result.stderr[-2000:]
  modules = sum(1 for p in LIBRARY for _ in (ROOT / p).rglob("*.py"))
  assert int(result.stdout.split()[-1]) == modules


def test_blocked_import_fails_when_the_library_needs_the_package():
  # The harness must be able to fail: block a package the library does
  # import and the import of the library is reported as failing.
  result = _run_blocked(("scipy",))
  assert result.returncode != 0
  assert "blocked for the test: scipy" in result.stderr


@pytest.mark.slow
def test_fresh_venv_without_the_extra(tmp_path):
  # A real install from PyPI without the extra (needs the package index).
  venv = tmp_path / "venv"
  subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
  python = venv / "bin" / "python"
  subprocess.run([str(python), "-m", "pip", "install", "-q", str(ROOT)],
                 check=True, timeout=1200)
  code = ("import dpcore, mechanisms, federated, importlib.util as u; "
          "import federated.feddpdr, mechanisms.svm.smo; "
          "assert u.find_spec('sklearn') is None; "
          "assert u.find_spec('tensorflow_datasets') is None")
  subprocess.run([str(python), "-c", code], check=True, cwd=tmp_path,
                 env={"JAX_PLATFORMS": "cpu"}, timeout=600)
