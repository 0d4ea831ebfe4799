"""Traced programs kept on disk, so a second run skips tracing too.

JAX's persistent compilation cache (``jax_compilation_cache_dir``) saves
the XLA compile of a program, but every run still traces the Python
function and lowers it before it can look the compiled program up: for
the FedDPDR training program (DP-PCA, ``optax`` L-BFGS fits under three
``vmap``\\ s) that is about 3 s of a 2-core CPU's time, more than the rest
of a small run. :func:`load_or_export` keeps the lowered program itself,
serialised with ``jax.export``, next to JAX's cache; a later run with the
same program deserialises it (milliseconds) and the compile is then a
persistent-cache hit.

Which program a file holds is decided by :func:`program_key`: a SHA-256
of the program's name and settings, the arguments' shapes and dtypes, the
JAX, jaxlib and optax versions, the JAX settings that change lowering
(x64, PRNG implementation, matmul precision), the backend, and the bytes
of every ``.py`` file of ``dpcore``, ``mechanisms`` and ``federated``. Any
edit to the library, an upgrade, or another shape is therefore another
file: a stale program is never run. Files are written atomically
(a temporary file, then ``os.replace``); one that cannot be read is set
aside and the program exported again. Each program name keeps its
:data:`KEEP` most recently used files (a load marks its file used); older
ones are deleted when a new one is written.

Only single-device programs go through here (a mesh or several processes
trace as usual): the launch harness decides.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import pathlib
import sys
from collections.abc import Callable, Mapping, Sequence

import jax
from jax import export

LIBRARY_PACKAGES = ("dpcore", "mechanisms", "federated")
"""Packages whose source a stored program depends on."""

KEEP = 32
"""Stored programs kept per name (about 80-250 KB each)."""

_SUBDIR = "programs"
_LOADED: dict[tuple, Callable] = {}


def _library_digest() -> str:
  digest = hashlib.sha256()
  root = pathlib.Path(__file__).resolve().parent.parent
  for package in LIBRARY_PACKAGES:
    for path in sorted((root / package).rglob("*.py")):
      digest.update(str(path.relative_to(root)).encode())
      digest.update(path.read_bytes())
  return digest.hexdigest()


def _version(name: str) -> str:
  try:
    return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError:
    return "absent"


def _is_key(leaf) -> bool:
  return jax.dtypes.issubdtype(getattr(leaf, "dtype", None),
                               jax.dtypes.prng_key)


def program_key(name: str, settings: object, args: Sequence) -> str:
  """The file name (hex digest) of ``name`` at ``settings`` on ``args``.

  ``settings`` must have a ``repr`` that determines the traced program
  (e.g. a frozen dataclass of static arguments); ``args`` is the pytree of
  positional arguments (its structure, shapes and dtypes count).
  """
  leaves, treedef = jax.tree.flatten(tuple(args))
  parts = [
      name, repr(settings), repr(treedef),
      repr([(tuple(a.shape), str(a.dtype)) for a in leaves]),
      jax.__version__, _version("jaxlib"), _version("optax"),
      repr(jax.config.jax_enable_x64),
      repr(jax.config.jax_default_prng_impl),
      repr(jax.config.jax_default_matmul_precision),
      jax.default_backend(), sys.version.split()[0], _library_digest(),
  ]
  return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def load_or_export(fn: Callable, args: Sequence, *, name: str,
                   settings: object, cache_dir: str,
                   compiler_options: Mapping[str, object] | None = None
                   ) -> Callable:
  """A callable equal to ``fn``, its trace kept in ``cache_dir``.

  Args:
    fn: a function of the positional arguments ``args`` (a pytree of
      arrays; typed PRNG keys allowed) returning a tuple of arrays
      (rebuild a pytree around the call).
    args: example arguments (only structure, shapes and dtypes are used).
    name: the program's name, part of its key.
    settings: everything static that shapes the program (its ``repr`` is
      part of the key).
    cache_dir: directory of JAX's persistent cache; programs go under
      ``cache_dir/programs``.
    compiler_options: XLA options of the compile (``jax.jit``'s
      ``compiler_options``); JAX's cache keys the executable by them, the
      stored trace does not depend on them.

  Returns:
    ``run(*args)``: the stored program's jitted call on arguments of the
    same structure, shapes and dtypes; the same results as ``fn``.
  """
  args = tuple(args)
  leaves, treedef = jax.tree.flatten(args)
  impls = [jax.random.key_impl(leaf) if _is_key(leaf) else None
           for leaf in leaves]

  def to_flat(arguments):
    got = jax.tree.leaves(tuple(arguments))
    return [jax.random.key_data(v) if impl is not None else v
            for v, impl in zip(got, impls, strict=True)]

  def flat_fn(*flat):
    restored = [v if impl is None else jax.random.wrap_key_data(v, impl=impl)
                for v, impl in zip(flat, impls, strict=True)]
    return tuple(fn(*jax.tree.unflatten(treedef, restored)))

  key = program_key(name, settings, args)
  options = dict(compiler_options or {})
  loaded = (key, tuple(sorted(options.items())))
  if loaded not in _LOADED:
    _LOADED[loaded] = jax.jit(
        _load_or_export(flat_fn, to_flat(args), key=key, name=name,
                        cache_dir=cache_dir).call,
        compiler_options=options or None)
  call = _LOADED[loaded]
  return lambda *arguments: call(*to_flat(arguments))


def _load_or_export(flat_fn, flat_args, *, key: str, name: str,
                    cache_dir: str) -> export.Exported:
  directory = os.path.join(os.path.expanduser(cache_dir), _SUBDIR)
  path = os.path.join(directory, f"{name}-{key[:32]}.jaxexport")
  if os.path.exists(path):
    try:
      with open(path, "rb") as f:
        exported = export.deserialize(bytearray(f.read()))
      os.utime(path)  # used now: kept by prune
      return exported
    except Exception as e:  # noqa: BLE001 - any unreadable file is redone
      print(f"note: stored program {path} could not be read ({e}); "
            f"tracing again", file=sys.stderr, flush=True)
      os.replace(path, path + ".bad")
  specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in flat_args]
  exported = export.export(jax.jit(flat_fn))(*specs)
  os.makedirs(directory, exist_ok=True)
  partial_path = f"{path}.{os.getpid()}.tmp"
  with open(partial_path, "wb") as f:
    f.write(exported.serialize())
  os.replace(partial_path, path)
  prune(directory, name)
  return exported


def prune(directory: str, name: str, keep: int = KEEP) -> list[str]:
  """Deletes all but the ``keep`` most recently used stored programs of
  ``name`` in ``directory``; returns the deleted paths."""
  stored = []
  for entry in os.scandir(directory):
    if entry.name.startswith(f"{name}-") and entry.name.endswith(
        ".jaxexport"):
      try:
        stored.append((entry.stat().st_mtime, entry.path))
      except FileNotFoundError:  # deleted by another process meanwhile
        pass
  stored.sort(reverse=True)
  deleted = []
  for _, path in stored[keep:]:
    try:
      os.remove(path)
      deleted.append(path)
    except FileNotFoundError:
      pass
  return deleted
