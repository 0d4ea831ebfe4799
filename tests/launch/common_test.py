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


@pytest.mark.parametrize("values,want", [
    ("0.5,1,8", [0.5, 1.0, 8.0]),
    (["0.5", " 1 ", ""], [0.5, 1.0]),  # an absl list flag, a blank item
    ([], []),
])
def test_parse_floats_reads_a_list_flag(values, want):
  assert common.parse_floats(values, "--epsilons") == want


def test_parse_ints_reads_a_list_flag():
  assert common.parse_ints(["500", "2000"], "--iterations") == [500, 2000]


@pytest.mark.parametrize("parse,values,words", [
    (common.parse_floats, ["1", "x"],
     "--epsilons='1,x': expected a comma-separated list of numbers."),
    (common.parse_ints, "500,2.5",
     "--epsilons='500,2.5': expected a comma-separated list of integers."),
])
def test_a_bad_item_is_refused_in_one_line_naming_the_flag(parse, values,
                                                          words):
  with pytest.raises(ValueError) as caught:
    parse(values, "--epsilons")
  assert str(caught.value) == words
