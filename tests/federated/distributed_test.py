"""FedDPDR over several processes (federated.distributed), on one machine.

Processes join over loopback (``jax.distributed`` on 127.0.0.1, gloo for
the CPU collectives), each with forced host devices, and are compared with
the one-process, one-device run of the test process on what is
well-defined (:mod:`tests.federated.layouts`: its problem, premise checks
and tolerances). The full training comparison takes minutes (measured on
a 2-core machine shared with other test runs: 104 to 329 s per layout),
so it is marked slow; the default suite keeps a two-process DP-PCA and
subspace aggregation (the step whose weighted sum crosses processes, with
the keys of ``feddpdr.train``: 37 to 69 s of wall time on that shared
machine, about 21 s of CPU time for the three processes together) and the
host-side checks.
"""

import doctest
import os
import socket
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from dpcore import noise
from federated import aggregation, distributed, feddpdr, sharding
from mechanisms.pca import dp_pca
from tests.federated import layouts

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
_HANG_GUARD = 1800  # seconds; a hang guard only, never a speed assertion


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


def _launch(script: str, *, processes: int, devices: int, tmp_path) -> dict:
  """Runs ``script`` in ``processes`` joined processes; process 0's npz.

  Each process gets ``devices`` forced host devices and the names PID,
  NUM, ADDRESS and OUT; it must call ``distributed.initialize(ADDRESS,
  NUM, PID)`` before any JAX computation and have process 0 write OUT.
  """
  out_path = tmp_path / "out.npz"
  address = f"127.0.0.1:{_free_port()}"
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": _REPO,
         "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
  procs, logs = [], []
  for pid in range(processes):
    head = textwrap.dedent(f"""
        PID, NUM, ADDRESS = {pid}, {processes}, {address!r}
        OUT = {str(out_path)!r}
    """)
    log = open(tmp_path / f"process{pid}.log", "w+")
    logs.append(log)
    procs.append(subprocess.Popen(
        [sys.executable, "-c", head + textwrap.dedent(script)], cwd=_REPO,
        env=env, stdout=log, stderr=subprocess.STDOUT, text=True))
  try:
    codes = [proc.wait(timeout=_HANG_GUARD) for proc in procs]
  except subprocess.TimeoutExpired:
    for proc in procs:
      proc.kill()
    pytest.fail(f"{processes} processes on loopback did not finish within "
                f"{_HANG_GUARD} s (a hang)")
  finally:
    tails = []
    for pid, log in enumerate(logs):
      log.seek(0)
      tails.append(f"--- process {pid} ---\n{log.read()[-3000:]}")
      log.close()
  assert codes == [0] * processes, "\n".join(tails)
  with np.load(out_path) as data:
    return dict(data)


# DP-PCA of each participant on its own process's device, with the keys
# feddpdr.train derives, then the size-weighted subspace aggregate (the
# server's sum, which crosses processes).
_PCA_SCRIPT = """
    from federated import distributed
    distributed.initialize(ADDRESS, NUM, PID)
    import jax
    import numpy as np
    from jax.experimental import multihost_utils
    from tests.federated import distributed_test, layouts
    parts, _, _ = layouts.problem(4)
    mesh = distributed.global_mesh(4)
    start, stop = distributed.local_block(mesh, 4)
    assert (stop - start) * NUM == 4, (start, stop)
    x = distributed.place_local(parts.x[start:stop], mesh, 4)
    mask = distributed.place_local(parts.mask[start:stop], mesh, 4)
    key = distributed.replicate(jax.random.key(2), mesh)
    got = distributed_test.pca_and_aggregate(key, x, mask, parts.sizes, mesh)
    bases, basis = multihost_utils.process_allgather(got, tiled=True)
    if PID == 0:
      np.savez(OUT, bases=bases, basis=basis, block=np.array([start, stop]))
"""


def pca_sigma() -> float:
  """The DP-PCA σ of the layouts problem's FedDPDR run (ε = 100)."""
  plan = feddpdr.make_plan(layouts.SIZES[:4], dim=layouts.D,
                         num_classes=layouts.NUM_CLASSES,
                         config=layouts.config("feddpdr"))
  return float(plan.sigma[0])


def pca_and_aggregate(key, x, mask, sizes, mesh):
  """Per-participant DP-PCA (σ of :func:`pca_sigma`) and the aggregate."""
  weights = aggregation.size_weights(np.asarray(sizes, np.float64))
  each = sharding.over_participants(
      lambda kk, xi, mi: dp_pca.noisy_basis(kk, xi, mi, k=layouts.K,
                                            sigma=pca_sigma()).components,
      mesh)

  def run(key, x, mask):
    pca_keys, _ = feddpdr.participant_keys(key, x.shape[0])
    bases = each(pca_keys, x, mask)
    return bases, aggregation.subspace_aggregate(bases, weights)

  return jax.jit(run)(key, x, mask)


@pytest.mark.slow  # heavy for the default suite (CI time)
def test_two_processes_give_the_one_process_pca_and_aggregate(tmp_path):
  got = _launch(_PCA_SCRIPT, processes=2, devices=1, tmp_path=tmp_path)
  assert got["block"].tolist() == [0, 2]  # process 0 holds participants 0, 1
  parts, _, _ = layouts.problem(4)
  bases, basis = pca_and_aggregate(jax.random.key(2), parts.x, parts.mask,
                                   parts.sizes, None)
  # Premise of the comparison (layouts): every participant's top K + 1
  # noisy eigenvalues are apart, so the bases are well-defined and agree
  # to float32 rounding (BASIS_TOL; layouts module docstring).
  layouts._check_premise(parts, np.full(4, pca_sigma()))
  layouts._check_aggregate_premise(np.asarray(bases), parts.sizes)
  np.testing.assert_allclose(got["bases"], bases, atol=layouts.BASIS_TOL)
  np.testing.assert_allclose(got["basis"], basis, atol=layouts.BASIS_TOL)
  # Neighbouring participants' bases differ far beyond the tolerance
  # (measured 0.09, 90x it), so a key or row block landing on the wrong
  # participant would fail the comparison above.
  assert np.max(np.abs(got["bases"][1] - bases[0])) > 10 * layouts.BASIS_TOL


# The moments aggregate across processes: each process sums its own
# participants' noisy second moments (the keys feddpdr.train derives), the
# per-device sums are added across processes, and every process takes the
# top k of the total.
_MOMENTS_SCRIPT = """
    from federated import distributed
    distributed.initialize(ADDRESS, NUM, PID)
    import jax
    import numpy as np
    from tests.federated import distributed_test, layouts
    parts, _, _ = layouts.problem(4)
    mesh = distributed.global_mesh(4)
    start, stop = distributed.local_block(mesh, 4)
    x = distributed.place_local(parts.x[start:stop], mesh, 4)
    mask = distributed.place_local(parts.mask[start:stop], mesh, 4)
    key = distributed.replicate(jax.random.key(2), mesh)
    total, basis = distributed_test.moments_and_aggregate(key, x, mask, mesh)
    total, basis = (np.asarray(a.addressable_data(0)) for a in (total, basis))
    other = distributed_test.gather_to_zero(total)
    if PID == 0:
      np.savez(OUT, total=total, basis=basis, other_total=other)
"""


def gather_to_zero(value):
  """Every process's copy of ``value``, stacked (in each process)."""
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return multihost_utils.process_allgather(np.asarray(value))


def moments_and_aggregate(key, x, mask, mesh, *, shift: int = 0):
  """Σᵢ (XᵢᵀXᵢ + Zᵢ) with the σ of :func:`pca_sigma` and its top K.

  ``shift`` (a test of the test) gives participant i the keys of
  participant i + shift, as a process reading the wrong key block would.
  """
  d = x.shape[-1]
  summed = aggregation.summed_over_participants(
      lambda kk, xi, mi: dp_pca.second_moment_and_noise(
          kk, xi, mi, sigma=pca_sigma()), mesh)

  def run(key, x, mask):
    pca_keys, _ = feddpdr.participant_keys(key, x.shape[0], first=shift)
    m, z = summed(pca_keys, x, mask)
    total = m + noise.symmetric_from_upper(z, d)
    return total, aggregation.moments_aggregate(total, layouts.K)

  return jax.jit(run)(key, x, mask)


@pytest.mark.slow  # two processes (~15 s); the PCA test above runs by default
def test_two_processes_give_the_one_process_moments_aggregate(tmp_path):
  got = _launch(_MOMENTS_SCRIPT, processes=2, devices=1, tmp_path=tmp_path)
  parts, _, _ = layouts.problem(4)
  total, basis = jax.device_get(moments_and_aggregate(
      jax.random.key(2), parts.x, parts.mask, None))
  # Both processes hold the same total (it was added across them).
  np.testing.assert_array_equal(got["other_total"][0],
                                got["other_total"][1])
  # The order of the float32 additions differs between the layouts.
  scale = np.max(np.abs(total))
  np.testing.assert_allclose(got["total"], total, atol=1e-5 * scale)
  # Premise: the K-th and (K+1)-th eigenvalues of the total are far apart
  # against that rounding, so the top K is well-defined.
  eig = np.linalg.eigvalsh(total.astype(np.float64))[::-1]
  assert eig[layouts.K - 1] - eig[layouts.K] > 1e3 * 1e-5 * scale
  np.testing.assert_allclose(got["basis"], basis, atol=layouts.BASIS_TOL)
  # Another participant's keys change the total far beyond the tolerance.
  shifted, _ = jax.device_get(moments_and_aggregate(
      jax.random.key(2), parts.x, parts.mask, None, shift=1))
  assert np.max(np.abs(shifted - total)) > 100 * 1e-5 * scale


# feddpdr.train on the global mesh: each process pads and places only its
# own participants' rows (re-padded locally first, so the padding to the
# run's largest participant is exercised), then gathers the outputs.
_TRAIN_SCRIPT = """
    from federated import distributed
    distributed.initialize(ADDRESS, NUM, PID)
    import jax
    import numpy as np
    from federated import feddpdr, partition
    from tests.federated import layouts
    parts, _, _ = layouts.problem(4)
    mesh = distributed.global_mesh(4)
    assert mesh.size == NUM * len(jax.local_devices()), mesh
    start, stop = distributed.local_block(mesh, 4)
    keep = parts.mask[start:stop] > 0
    local = partition.pad(
        [parts.x[i][keep[i - start]] for i in range(start, stop)],
        [parts.y[i][keep[i - start]] for i in range(start, stop)])
    cfg = layouts.config("feddpdr")
    plan = feddpdr.make_plan(parts.sizes, dim=layouts.D,
                           num_classes=layouts.NUM_CLASSES, config=cfg)
    with jax.enable_x64(True):
      args = feddpdr.global_train_arguments(jax.random.key(2), local, plan,
                                            seeds=2, mesh=mesh)
      out = feddpdr.train(*args, config=cfg,
                          num_classes=layouts.NUM_CLASSES, mesh=mesh)
      host = distributed.gather(out)
      reduced = distributed.gather(out._replace(bases=None, betas=None))
    assert reduced.bases is None and reduced.betas is None
    np.testing.assert_array_equal(reduced.global_basis, host.global_basis)
    if PID == 0:
      np.savez(OUT, sigma=plan.sigma, **host._asdict())
"""


@pytest.mark.slow
@pytest.mark.parametrize("processes, devices", [(2, 1), (2, 2), (1, 4)])
def test_processes_give_the_one_device_run(tmp_path, processes, devices):
  # 2 processes x 1 device, 2 x 2 (4 global devices), and 1 process with 4
  # forced host devices: the same local bases, local models, global basis,
  # global model and test scores as one device, up to the layouts module's
  # rounding bounds (which also check that the spectra make them
  # well-defined). Measured on a loaded 2-core machine: 329 s (2, 1),
  # 213 s (2, 2), 104 s (1, 4).
  got = _launch(_TRAIN_SCRIPT, processes=processes, devices=devices,
                tmp_path=tmp_path)
  parts, x_test, _ = layouts.problem(4)
  want = layouts.train(parts, "feddpdr")
  layouts.assert_same_runs(got, want, parts, x_test, mechanism="feddpdr")


# The library's one orchestration over two processes: each holds its
# block of participants, execute builds the global arrays, trains, gathers
# every participant's model (DPDR-DPML is scored on each) and sums up.
_EXECUTE_SCRIPT = """
    from federated import distributed
    distributed.initialize(ADDRESS, NUM, PID)
    import jax
    import numpy as np
    from federated import feddpdr
    from tests.federated import layouts
    parts, x_test, y_test = layouts.problem(4)
    mesh = distributed.global_mesh(4)
    start, stop = distributed.local_block(mesh, 4)
    local = parts._replace(x=parts.x[start:stop], y=parts.y[start:stop],
                           mask=parts.mask[start:stop],
                           sizes=parts.sizes[start:stop])
    jobs = []
    def train_with(job):
      jobs.append(job)
      return job()
    got = feddpdr.execute(
        jax.random.key(2), local, x_test, y_test,
        num_classes=layouts.NUM_CLASSES, config=layouts.config("dpdr_dpml"),
        seeds=2, mesh=mesh, sizes=parts.sizes, train_with=train_with)
    assert len(jobs) == 1 and jobs[0].mesh is mesh
    assert isinstance(got.output.bases, np.ndarray)  # gathered to the host
    if PID == 0:
      np.savez(OUT, sigma=got.plan.sigma,
               per=np.asarray(got.summary.accuracy_per_participant),
               epsilon=got.summary.privacy["epsilon"])
"""


@pytest.mark.slow
def test_execute_over_processes_is_the_one_process_run(tmp_path):
  got = _launch(_EXECUTE_SCRIPT, processes=2, devices=1, tmp_path=tmp_path)
  parts, x_test, y_test = layouts.problem(4)
  config = layouts.config("dpdr_dpml")
  want = feddpdr.execute(jax.random.key(2), parts, x_test, y_test,
                         num_classes=layouts.NUM_CLASSES, config=config,
                         seeds=2)
  np.testing.assert_array_equal(got["sigma"], want.plan.sigma)
  assert float(got["epsilon"]) == want.summary.privacy["epsilon"]
  per = np.asarray(want.summary.accuracy_per_participant)
  assert got["per"].shape == per.shape == (2, 4)
  # Rounding may move a test prediction or two of a local model (the
  # layouts module's premise checks are about the bases, not the scores).
  np.testing.assert_allclose(got["per"], per, atol=0.05)
  with pytest.raises(ValueError, match="sizes not given"):
    feddpdr.execute(jax.random.key(2), parts, x_test, y_test,
                    num_classes=layouts.NUM_CLASSES, config=config,
                    mesh=_TwoProcessMesh())


class _TwoProcessMesh:
  """Looks like a mesh over two processes (only its devices are read)."""

  class _Device:
    def __init__(self, process_index):
      self.process_index = process_index

  devices = np.asarray([_Device(0), _Device(1)], dtype=object)


def test_initialize_refuses_bad_settings():
  # Every check runs before jax.distributed is touched.
  with pytest.raises(ValueError, match="process_id=2 must be an integer in"):
    distributed.initialize("127.0.0.1:1234", 2, 2)
  with pytest.raises(ValueError, match="process_id=-1"):
    distributed.initialize("127.0.0.1:1234", 2, -1)
  with pytest.raises(ValueError, match="num_processes"):
    distributed.initialize("127.0.0.1:1234", 0, 0)
  with pytest.raises(ValueError, match="host:port"):
    distributed.initialize("127.0.0.1", 2, 0)
  with pytest.raises(ValueError, match="host:port"):
    distributed.initialize("127.0.0.1:99999", 2, 0)
  with pytest.raises(ValueError, match="process_id not given"):
    distributed.initialize("127.0.0.1:1234", 2)
  # Named as the library's arguments (a script's flags spell them so).
  with pytest.raises(ValueError, match="^process_id=2 must be"):
    distributed.check_settings("127.0.0.1:1234", 2, 2)
  with pytest.raises(ValueError, match="^coordinator_address="):
    distributed.check_settings("nohost", 2, 0)


def test_participant_blocks():
  assert distributed.participant_block([0, 0, 1, 1], 8, process=0) == (0, 4)
  assert distributed.participant_block([0, 0, 1, 1], 8, process=1) == (4, 8)
  assert distributed.participant_block([0, 1, 2], 6, process=2) == (4, 6)
  assert distributed.participant_block([0], 5, process=0) == (0, 5)
  with pytest.raises(ValueError, match="use a multiple of 4"):
    distributed.participant_block([0, 0, 1, 1], 6, process=0)
  with pytest.raises(ValueError, match="not contiguous"):
    distributed.participant_block([0, 1, 0, 1], 8, process=0)
  with pytest.raises(ValueError, match="no device"):
    distributed.participant_block([0, 0], 4, process=1)


def test_global_mesh_needs_a_multiple_of_the_devices():
  mesh = distributed.global_mesh(3)  # the test process: one device
  assert mesh.size == len(jax.devices())
  assert distributed.local_block(mesh, 3) == (0, 3)
  two = [jax.devices()[0]] * 2  # stands for two devices in the message
  with pytest.raises(ValueError, match="use a multiple of 2 participants"):
    distributed.global_mesh(3, two)
  with pytest.raises(ValueError, match="num_participants"):
    distributed.global_mesh(0)


def test_docstring_example():
  result = doctest.testmod(distributed, optionflags=doctest.ELLIPSIS)
  assert result.attempted > 0 and result.failed == 0
