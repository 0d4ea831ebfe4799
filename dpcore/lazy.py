"""Sub-modules imported on first use (PEP 562), for the packages' inits.

``dpcore``, ``mechanisms`` and ``federated`` reach their sub-modules as
attributes without importing them up front, so importing a light module
(e.g. ``dpcore.options``) does not import JAX. The sub-modules are found
on the package's path, so a new module needs no list to be added to.
Standard library only.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterable, Mapping

__all__ = ["attach"]


def attach(package: str, submodules: Iterable[str] | None = None,
           exports: Mapping[str, str] | None = None
           ) -> tuple[Callable[[str], object], Callable[[], list[str]],
                      list[str]]:
  """``(__getattr__, __dir__, __all__)`` for ``package``'s ``__init__``.

  ``package.<name>`` imports sub-module ``name`` on first use; a name of
  ``exports`` (name → sub-module) is read from its sub-module and kept.
  ``submodules`` None (the packages' use): every module and sub-package
  on the package's path, found without importing them.
  """
  if submodules is None:
    submodules = (m.name for m in pkgutil.iter_modules(
        sys.modules[package].__path__) if not m.name.startswith("_"))
  submodules = tuple(submodules)
  exports = dict(exports or {})
  names = sorted(submodules + tuple(exports))

  def __getattr__(name: str):  # noqa: N807
    if name in submodules:
      return importlib.import_module(f"{package}.{name}")
    if name in exports:
      module = importlib.import_module(f"{package}.{exports[name]}")
      value = getattr(module, name)
      setattr(sys.modules[package], name, value)
      return value
    raise AttributeError(f"module {package!r} has no attribute {name!r}")

  def __dir__() -> list[str]:  # noqa: N807
    return sorted(set(vars(sys.modules[package])) | set(names))

  return __getattr__, __dir__, names
