"""launch.common: the import guard of the scripts."""

import dataclasses
import gc
import threading

import pytest
from absl import flags

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
  with pytest.raises(ValueError) as caught:
    parse(values, "--epsilons", example="1,2")
  assert str(caught.value) == words[:-1] + ", e.g. --epsilons=1,2."


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Setting:
  epsilon: float = 1.0
  seeds: tuple = (0,)
  name: str = "a"


def _flags(**defined):
  values = flags.FlagValues()
  flags.DEFINE_float("epsilon", 1.0, "", flag_values=values)
  flags.DEFINE_list("seeds", ["0"], "", flag_values=values)
  if defined.get("name", True):
    flags.DEFINE_string("name", "a", "", flag_values=values)
  values(["prog", "--epsilon=2.5", "--seeds=3,4"])
  return values


def test_setting_from_flags_reads_each_field_from_its_flag():
  values = _flags()
  setting = common.setting_from_flags(
      _Setting, flag_values=values,
      seeds=tuple(common.parse_ints(values["seeds"].value)))
  assert setting == _Setting(epsilon=2.5, seeds=(3, 4), name="a")


def test_setting_from_flags_refuses_a_field_without_flag_or_value():
  values = _flags(name=False)
  with pytest.raises(TypeError, match="_Setting.name has no flag --name"):
    common.setting_from_flags(_Setting, flag_values=values, seeds=(3,))
  # A parsed value stands in for the missing flag.
  assert common.setting_from_flags(
      _Setting, flag_values=values, seeds=(3,), name="b").name == "b"


def test_check_output_path_refuses_a_directory_and_a_missing_required_path(
    tmp_path):
  common.check_output_path("", "--table_md")  # no file asked for
  with pytest.raises(ValueError, match=r"^--out: give a JSON-lines file"):
    common.check_output_path("", "--out", required=True)
  with pytest.raises(ValueError, match="is a directory"):
    common.check_output_path(str(tmp_path), "--out")
  path = tmp_path / "sub" / "r.jsonl"
  common.check_output_path(str(path), "--out", required=True)
  assert path.exists() and path.read_text() == ""


def test_round_robin_compiles_each_path_then_times_them_in_turns():
  calls = []

  def path(name):
    return lambda r: calls.append((name, r))

  timed = common.round_robin({"a": path("a"), "slow": path("slow"),
                              "b": path("b")}, repeats=3, most={"slow": 1})
  # First calls, then rounds in which every path takes its turn, the
  # capped path only in the first.
  assert calls == [("a", None), ("slow", None), ("b", None),
                   ("a", 0), ("slow", 0), ("b", 0),
                   ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
  assert {k: len(v) for k, v in timed.wall.items()} == {
      "a": 3, "slow": 1, "b": 3}
  assert {k: len(v) for k, v in timed.cpu.items()} == {
      "a": 3, "slow": 1, "b": 3}
  assert set(timed.first_call) == {"a", "slow", "b"}
  assert all(s >= 0 for v in timed.wall.values() for s in v)


_EXAMPLE = '[{"a": 1}]'


@pytest.mark.parametrize("text", ['[{"a": 1}, {"a": 2, "b": 3}]',
                                  '{"candidates": [{"a": 1}, {"a": 2, '
                                  '"b": 3}]}'])
def test_read_candidates_takes_a_list_or_the_list_under_candidates(
    tmp_path, text):
  path = tmp_path / "c.json"
  path.write_text(text)
  assert common.read_candidates(str(path), "--tune", ("a", "b"),
                                example=_EXAMPLE) == [{"a": 1},
                                                      {"a": 2, "b": 3}]


@pytest.mark.parametrize("text, words", [
    (None, "--tune={path}: no such file; give a JSON list of candidate "
           "settings, e.g. " + _EXAMPLE),
    ("[{'a': 1}]", "--tune={path} is not JSON"),
    ("[]", "the candidate list is empty or not a list"),
    ('{"a": 1}', "the candidate list is empty or not a list"),
    ('[{"a": 1}, {}]', "candidate 1 is not a non-empty object of settings "
                       "(a, b)"),
    ('[{"a": 1}, 2]', "candidate 1 is not a non-empty object"),
    ('[{"a": 1, "c": 2, "d": 3}]', "candidate 0 has unknown setting(s) "
                                   "['c', 'd']; a candidate may set a, b."),
])
def test_read_candidates_refuses_in_one_line_naming_flag_and_fix(
    tmp_path, text, words):
  path = tmp_path / "c.json"
  if text is not None:
    path.write_text(text)
  with pytest.raises(ValueError) as err:
    common.read_candidates(str(path), "--tune", ("b", "a"), example=_EXAMPLE)
  message = str(err.value)
  assert "\n" not in message
  assert words.replace("{path}", str(path)) in message
