"""Sharding the participant axis (federated.sharding).

Multi-device checks run in a subprocess with forced host devices
(``XLA_FLAGS`` must be set before JAX starts). Layouts are compared on what
is well-defined (:mod:`tests.federated.layouts`). The full comparison on
four devices is marked slow. A small sharded DP-PCA on two devices stays in
the default suite: on a 2-core machine that setting hung every time inside
jaxlib's batched LAPACK kernels, until ``dpcore.linalg`` took batches
one matrix at a time on the CPU.
"""

import subprocess

import jax
import numpy as np
import pytest

from federated import sharding
from tests.federated import layouts

_SHARDED_RUNS = """
    import numpy as np
    from federated import sharding
    from tests.federated import layouts
    parts, _, _ = layouts.problem(6)
    mesh = sharding.participant_mesh(6)  # 6 participants on 3 devices
    assert mesh.size == 3, mesh
    out = {}
    for mech in ("feddpdr", "dpdr_dpml", "nonpriv"):
      for name, m, c in (("sharded", mesh, None), ("sharded_chunked", mesh, 1)):
        for field, value in layouts.train(parts, mech, mesh=m,
                                          chunk=c).items():
          out[f"{mech}/{name}/{field}"] = value
    np.savez(OUT, **out)
"""


def _split(flat: dict, prefix: str) -> dict:
  return {name[len(prefix):]: value for name, value in flat.items()
          if name.startswith(prefix)}


@pytest.mark.slow
def test_sharded_participants_give_the_same_runs(tmp_path):
  parts, x_test, _ = layouts.problem(6)
  flat = layouts.run_on_devices(_SHARDED_RUNS, 4, tmp_path / "runs.npz",
                                timeout=1800)
  for mech in ("feddpdr", "dpdr_dpml", "nonpriv"):
    plain = layouts.train(parts, mech)
    for name in ("sharded", "sharded_chunked"):
      got = _split(flat, f"{mech}/{name}/")
      layouts.assert_same_runs(got, plain, parts, x_test, mechanism=mech)


# aggregation="distributed_moments" on a mesh: each device encodes and
# masks its participants' messages, the server's modular sum and decoding
# see them all. The sum is of integers, so the basis is bitwise the
# unsharded one.
_SECURE_SHARDED = """
    import numpy as np
    from federated import sharding
    from tests.federated import layouts
    parts, _, _ = layouts.problem(6)
    mesh = sharding.participant_mesh(6)
    assert mesh.size == 2, mesh
    np.savez(OUT, **layouts.train(parts, "feddpdr", seeds=1, mesh=mesh,
                                  aggregation="distributed_moments"))
"""


@pytest.mark.slow
def test_secure_moments_on_a_mesh_give_the_unsharded_basis(tmp_path):
  parts, _, _ = layouts.problem(6)
  got = layouts.run_on_devices(_SECURE_SHARDED, 2, tmp_path / "secure.npz",
                               timeout=1800)
  want = layouts.train(parts, "feddpdr", seeds=1,
                       aggregation="distributed_moments")
  np.testing.assert_array_equal(got["global_basis"], want["global_basis"])
  np.testing.assert_allclose(got["global_betas"], want["global_betas"],
                             rtol=0, atol=layouts.MODEL_TOL)
  assert np.all(np.isfinite(want["global_basis"]))


# Each device's participants: DP-PCA (batched eigh) and the subspace
# aggregate (thin SVD of the stacked bases) under shard_map, vmapped over 2
# repeats as feddpdr.train does: with jnp.linalg's batched kernels this
# hung every time on 2 cores (checked: no output after 120 s), and with
# dpcore.linalg it finishes in seconds.
_TWO_DEVICE_PCA = """
    import numpy as np
    from federated import sharding
    from tests.federated import layouts
    mesh = sharding.participant_mesh(6)
    assert mesh.size == 2, mesh
    bases, basis = layouts.pca_and_aggregate(mesh)
    np.savez(OUT, bases=np.asarray(bases), basis=np.asarray(basis))
"""


def test_two_cpu_devices_on_two_cores_do_not_hang(tmp_path):
  # Regression test: with 2 forced host devices on a 2-core machine the
  # batched LAPACK eigh inside the sharded DP-PCA waited forever on XLA's
  # intra-op pool (every run, before dpcore.linalg decomposed batches
  # one at a time on the CPU). The problem is tiny (twelve 20 × 20
  # decompositions and two SVDs, seconds of compilation), so the generous
  # limit below separates a hang from a slow, busy machine.
  try:
    got = layouts.run_on_devices(_TWO_DEVICE_PCA, 2, tmp_path / "pca.npz",
                                 timeout=900)
  except subprocess.TimeoutExpired:
    pytest.fail("the 2-device sharded run hung (batched LAPACK on the CPU)")
  bases, basis = layouts.pca_and_aggregate(None)  # one device
  # The same keys per participant on either layout, a well-separated
  # spectrum (layouts module docstring): equal up to float32 rounding.
  np.testing.assert_allclose(got["bases"], bases, atol=layouts.BASIS_TOL)
  np.testing.assert_allclose(got["basis"], basis, atol=layouts.BASIS_TOL)


def test_participant_mesh_uses_a_divisor_of_the_participants():
  devices = jax.devices()[:1] * 1
  assert sharding.participant_mesh(5, devices).size == 1
  with pytest.raises(ValueError, match="num_participants"):
    sharding.participant_mesh(0, devices)
  with pytest.raises(ValueError, match="device"):
    sharding.participant_mesh(3, [])
  x = jax.numpy.ones((4, 2))
  assert sharding.place(x, None) is x
  mapped = sharding.over_participants(lambda a: a.sum(), None)
  assert mapped(x).shape == (4,)


@pytest.mark.slow
def test_participant_chunks_give_the_same_runs():
  # Mapping 2 participants at a time (5 = 2 + 2 + 1: the last block is
  # shorter) gives the runs of the all-at-once vmap: the same local bases,
  # local models, global basis, global model and test scores, up to the
  # rounding bounds of the layouts module (which also checks that the
  # spectra make them well-defined). FedDPDR runs every per-participant
  # step the other mechanisms do; they are compared in the slow test.
  from federated import feddpdr
  parts, x_test, y_test = layouts.problem(5)
  whole = layouts.train(parts, "feddpdr")
  chunked = layouts.train(parts, "feddpdr", chunk=2)
  layouts.assert_same_runs(chunked, whole, parts, x_test,
                           mechanism="feddpdr")
  with pytest.raises(ValueError, match="participant_chunk"):
    feddpdr.run(jax.random.key(2), parts, x_test, y_test,
                num_classes=3, config=layouts.config("feddpdr"),
                participant_chunk=0)


@pytest.mark.slow
@pytest.mark.parametrize("shifted", ["key", "mask"])
def test_the_layout_check_catches_a_shifted_participant(monkeypatch,
                                                        shifted):
  # A layout bug planted on purpose: in the chunked path, each participant
  # gets its neighbour-by-one-chunk's key (or mask). The comparison of
  # test_participant_chunks_give_the_same_runs must reject the result.
  original = sharding.over_participants

  def buggy(fn, mesh, chunk=None):
    mapped = original(fn, mesh, chunk=chunk)
    if chunk is None:
      return mapped

    def shifted_args(*args):
      args = list(args)
      # DP-PCA maps (key, x, mask, sigma); the fits (key, z, y, mask, ...).
      pos = 0 if shifted == "key" else (2 if len(args) == 4 else 3)
      args[pos] = jax.numpy.roll(args[pos], chunk, axis=0)
      return mapped(*args)
    return shifted_args

  # The training program is one module-level jit: a program another test
  # compiled with chunk=2 would be reused without the planted bug, and the
  # buggy one must not be reused by a later test either.
  jax.clear_caches()
  monkeypatch.setattr(sharding, "over_participants", buggy)
  parts, x_test, _ = layouts.problem(5)
  try:
    whole = layouts.train(parts, "feddpdr")
    chunked = layouts.train(parts, "feddpdr", chunk=2)
  finally:
    jax.clear_caches()
  with pytest.raises(AssertionError, match="Not equal to tolerance"):
    layouts.assert_same_runs(chunked, whole, parts, x_test,
                             mechanism="feddpdr")


def test_chunked_map_equals_vmap():
  x = jax.random.normal(jax.random.key(0), (7, 6, 6))
  sym = x + jax.numpy.swapaxes(x, 1, 2)
  fn = lambda a: jax.numpy.linalg.eigh(a)[0]  # noqa: E731
  whole = sharding.over_participants(fn, None)(sym)
  for chunk in (1, 3, 7, 10):
    got = sharding.over_participants(fn, None, chunk=chunk)(sym)
    assert got.shape == whole.shape
    assert jax.numpy.allclose(got, whole, atol=1e-5), chunk
  with pytest.raises(ValueError, match="chunk"):
    sharding.over_participants(fn, None, chunk=0)
