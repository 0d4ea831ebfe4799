"""launch.common: the import guard of the scripts."""

import gc
import threading

import pytest

from launch import common


@pytest.fixture(autouse=True)
def _restore_gc():
  enabled = gc.isenabled()
  yield
  gc.unfreeze()
  (gc.enable if enabled else gc.disable)()


@pytest.mark.parametrize("enabled", [True, False])
def test_heavy_imports_pauses_the_collector_and_freezes(enabled):
  (gc.enable if enabled else gc.disable)()
  gc.unfreeze()
  with common.heavy_imports():
    assert not gc.isenabled()
    made = [[i] for i in range(1000)]  # objects that outlive the block
  assert gc.get_freeze_count() >= len(made)
  assert gc.isenabled() == enabled  # the caller's setting comes back


def test_heavy_imports_restores_the_collector_after_an_error():
  gc.enable()
  with pytest.raises(ImportError):
    with common.heavy_imports():
      import a_module_that_does_not_exist  # noqa: F401  # pylint: disable=g-import-not-at-top,import-error,unused-import
  assert gc.isenabled()


def test_heartbeat_reports_at_a_steady_rate_until_the_block_ends():
  # Issue #32: a long jitted loop reports from the host, every every_s.
  lines, two = [], threading.Event()

  def report(line):
    lines.append(line)
    if len(lines) >= 2:
      two.set()

  with common.heartbeat("dpwss (10 iterations)", every_s=0.01,
                        progress=report):
    two.wait()  # the block lasts until two lines came, however long
  seen = len(lines)
  assert seen >= 2
  assert all(ln.startswith("dpwss (10 iterations): still running (")
             for ln in lines)
  lines_after = list(lines)
  assert lines_after == lines[:seen]  # none after the block ended
  with common.heartbeat("quiet", every_s=0.01, progress=None):
    pass  # no reporter: no thread, no lines
