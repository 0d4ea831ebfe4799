"""launch.audit and launch.audit_run: the specs are found beside their
mechanisms, none is dropped, and the script's verdicts and outputs.

Each family's own audits (small runs below the claim, broken variants
caught) are tested beside it, ``tests/<package>/<module>_audit_test.py``.
"""

import dataclasses
import importlib
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpcore import accounting, audit_spec, noise_audit
from dpcore.audit_spec import POSITIONS, group
from launch import audit_run as audit_script
from tests.dpcore import products

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def _at(base, *bases):
  return [f"{b}@{p}" for b in (base, *bases) for p in POSITIONS]


# Every audit module and the names of its specs, in its order. A spec (or a
# module) dropped, renamed or added without a word here fails
# test_discovery_collects_exactly_the_expected_specs.
EXPECTED = {
    "dpcore.dpsgd_audit": [*_at("dpsgd"), "dpsgd_mask_dropped",
                           "dpsgd_clip_skipped"],
    "dpcore.noise_audit": ["gaussian", "laplace", "discrete_gaussian",
                           "discrete_laplace", "exponential",
                           "gaussian_sigma_halved",
                           "laplace_wrong_sensitivity",
                           "discrete_gaussian_sigma_halved",
                           "discrete_laplace_scale_halved",
                           "exponential_sensitivity_halved"],
    "dpcore.trainer_audit": [*_at("trainer_ghost"), "trainer_clip_skipped"],
    "dpcore.tuning_audit": [
        "tuning_laplace", "tuning_poisson", "tuning_negative_binomial",
        "tuning_logarithmic", "tuning_per_trial_epsilon", "tuning_fixed_k",
        "tuning_k_released", "tuning_poisson_per_trial_epsilon",
        "tuning_negative_binomial_fixed_k", "tuning_logarithmic_fixed_k"],
    "federated.ddgsgd_audit": [
        *_at("fedsgd_distributed"), "fedsgd_distributed_share_over_p",
        "fedsgd_distributed_unbounded_rounding"],
    "federated.feddpdr_audit": [
        *_at("feddpdr_participant"), "feddpdr_participant_clip_skipped",
        *_at("feddpdr_distributed_moments"),
        "feddpdr_distributed_moments_share_over_p",
        *_at("feddpdr_distributed_moments_dropout"),
        "feddpdr_distributed_moments_dropout_all_shares"],
    "federated.fedsgd_audit": [
        *_at("fedsgd_server", "fedsgd_local", "fedsgd_participant"),
        "fedsgd_participant_compacted_mask@first",
        "fedsgd_server_noise_halved@first",
        "fedsgd_local_noise_halved@first"],
    "mechanisms.erm.objective_perturbation_audit": [
        *_at("objective_perturbation_huber"),
        *_at("objective_perturbation_logistic"),
        "objective_perturbation_huber_clip_skipped",
        "objective_perturbation_logistic_clip_skipped"],
    "mechanisms.erm.output_perturbation_audit": [
        *_at("output_perturbation"),
        "output_perturbation_add_remove_sensitivity"],
    "mechanisms.lvq.init_audit": [
        *_at("lvq_init_laplace", "lvq_init_gaussian"),
        "lvq_init_laplace_box_skipped", "lvq_init_gaussian_box_skipped",
        *_at("lvq_init_laplace_d4", "lvq_init_gaussian_d4"),
        "lvq_init_laplace_d4_scale_as_d1",
        "lvq_init_gaussian_d4_scale_as_d1"],
    "mechanisms.lvq.train_audit": [
        *_at("dplvq_glvq", "dplvq_gmlvq", "dplvq_glvq_vmap"),
        "dplvq_glvq_clip_skipped", "dplvq_gmlvq_clip_skipped",
        "dplvq_glvq_vmap_clip_skipped"],
    "mechanisms.features.normalization_audit": [
        *_at("features_data_norm"), "features_data_norm_clip_skipped",
        "features_data_norm_sensitivity_one"],
    "mechanisms.features.scattering_audit": [
        *_at("features_dpsgd"), "features_dpsgd_clip_skipped"],
    "mechanisms.features.scatternet_audit": [
        *_at("scatternet_head"), "scatternet_head_noise_quartered"],
    "mechanisms.pca.dp_pca_audit": [
        *_at("dp_pca", "dp_pca_discrete", "dp_pca_replace"),
        "dp_pca_clip_skipped", "dp_pca_discrete_clip_skipped",
        "dp_pca_replace_sensitivity_one"],
    "mechanisms.svm.dpwss_audit": [
        "dpwss_paper_one_selection_j", "dpwss_paper_one_selection_i",
        "dpwss_paper_transcript_j", "dpwss_paper_transcript_i",
        *_at("dpwss_private_transcript_j", "dpwss_private_transcript_i"),
        "dpwss_private_transcript_i_support_masked"],
    "mechanisms.svm.random_features_audit": [
        *_at("rff_dpsgd", "rff_output_perturbation"),
        "rff_dpsgd_sigma_halved",
        "rff_output_perturbation_unscaled_features"],
}


@pytest.fixture(scope="module")
def spec_list():
  return audit_script.specs()  # built once: the specs calibrate on the host


@pytest.fixture(scope="module")
def all_specs(spec_list):
  return {s.name: s for s in spec_list}


def test_discovery_finds_every_audit_module():
  assert audit_script.audit_modules() == sorted(EXPECTED)
  # The walk sees every file named *_audit.py of the three packages.
  on_disk = sorted(
      os.path.relpath(os.path.join(folder, name), _REPO)[:-3].replace(
          os.sep, ".")
      for package in audit_script.PACKAGES
      for folder, _, names in os.walk(os.path.join(_REPO, package))
      for name in names
      if name.endswith(".py") and audit_script.is_audit_module(name[:-3]))
  assert audit_script.audit_modules() == on_disk


def test_a_package_that_fails_to_import_is_an_error_not_a_skip(
    tmp_path, monkeypatch):
  # walk_packages skips a sub-package whose import fails unless told not
  # to: its audit modules would vanish and the audit still "pass".
  root = tmp_path / "fakelib"
  (root / "broken").mkdir(parents=True)
  (root / "__init__.py").write_text("")
  (root / "ok_audit.py").write_text("def specs():\n  return []\n")
  (root / "broken" / "__init__.py").write_text("import not_a_module_here\n")
  (root / "broken" / "lost_audit.py").write_text("def specs():\n  return []\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.setattr(audit_script, "PACKAGES", ("fakelib",))
  with pytest.raises(ImportError, match="cannot import the package "
                     "fakelib.broken"):
    audit_script.audit_modules()
  (root / "broken" / "__init__.py").write_text("")
  for name in [n for n in sys.modules if n.startswith("fakelib")]:
    monkeypatch.delitem(sys.modules, name)
  assert audit_script.audit_modules() == ["fakelib.broken.lost_audit",
                                          "fakelib.ok_audit"]


def test_discovery_collects_exactly_the_expected_specs(spec_list):
  want = [name for module in sorted(EXPECTED) for name in EXPECTED[module]]
  assert [s.name for s in spec_list] == want


def test_only_builds_the_modules_up_to_the_last_spec_it_names():
  # --only=gaussian needs dpcore.noise_audit alone of the modules after
  # it; a group name (every position) completes with its module; an
  # unknown name builds everything (and the runner then refuses it).
  modules = sorted(EXPECTED)
  upto = modules[:modules.index("dpcore.noise_audit") + 1]
  want = [name for module in upto for name in EXPECTED[module]]
  assert [s.name for s in audit_script.specs(until=["gaussian"])] == want
  upto = modules[:modules.index("mechanisms.pca.dp_pca_audit") + 1]
  want = [name for module in upto for name in EXPECTED[module]]
  assert [s.name for s in audit_script.specs(
      until=["dp_pca_replace", "gaussian"])] == want
  with pytest.raises(ValueError, match="unknown specs"):
    audit_script.run_audits(only=["gaussian", "no_such_spec"])


def test_audit_module_names():
  assert audit_script.is_audit_module("mechanisms.svm.dpwss_audit")
  assert audit_script.is_audit_module("federated.feddpdr.audit")
  assert not audit_script.is_audit_module("dpcore.audit_spec")
  assert not audit_script.is_audit_module("dpcore.auditing")
  assert not audit_script.is_audit_module("launch.audit_run")


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_each_audit_module_lists_specs_and_has_a_broken_variant(
    module, all_specs):
  assert "specs" in importlib.import_module(module).__all__
  # Every module brings a deliberately broken variant (CONTRIBUTING).
  assert any(all_specs[n].broken for n in EXPECTED[module]), module


# Unbroken specs whose broken variant carries another base name: the
# variant breaks the same release, read by a sibling spec's statistic.
BROKEN_ELSEWHERE = {
    "trainer_ghost": "trainer_clip_skipped",
    "tuning_laplace": "tuning_k_released",
    "dpwss_private_transcript_j": "dpwss_private_transcript_i_support_masked",
}


def test_every_claim_has_a_broken_variant(all_specs):
  # Each unbroken spec with a claim (every mode and option) has a broken
  # twin the audit must catch: its base name plus a suffix, or the one
  # named in BROKEN_ELSEWHERE. Specs without a claim (the paper's DPWSS
  # selection) have nothing to break.
  broken = {group(name) for name, spec in all_specs.items() if spec.broken}
  missing = set()
  for spec in all_specs.values():
    base = group(spec.name)
    if spec.broken or spec.reported_epsilon is None:
      continue
    if base in BROKEN_ELSEWHERE:
      assert BROKEN_ELSEWHERE[base] in broken, base
    elif not any(b.startswith(base + "_") for b in broken):
      missing.add(base)
  assert not missing, (
      f"unbroken specs without a broken variant: {sorted(missing)}")


def test_a_skipped_clip_is_caught_on_the_data_its_twin_audits(all_specs):
  # A clip (or box) skipped shows only on a row the clip would change. The
  # unbroken twin audits that same row, so that it tests the library's own
  # clip: were the clip gone from the library, the twin would fail too.
  twins = {group(n): n for n, s in all_specs.items()
           if not s.broken and s.position in (None, "first")}
  checked = []
  for name, spec in all_specs.items():
    if not (spec.broken and name.endswith(("_clip_skipped", "_box_skipped"))):
      continue
    base = next((b for b, other in BROKEN_ELSEWHERE.items() if other == name),
                name.rsplit("_", 2)[0])
    twin = all_specs[twins[base]]
    assert twin.position in (None, "first"), name
    for got, want in ((spec.data_0, twin.data_0), (spec.data_1, twin.data_1)):
      for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want),
                      strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert ({k: v for k, v in spec.settings.items() if k != "variant"}
            == {k: v for k, v in twin.settings.items() if k != "variant"}), (
                name)
    checked.append(name)
  assert len(checked) >= 12, checked


def test_specs_are_well_formed(spec_list):
  for spec in spec_list:
    assert spec.relation in ("add_remove", "replace_one"), spec.name
    json.dumps(spec.settings)
    assert spec.default_trials > 0
    if spec.broken:  # reported with an unbroken calibration's ε
      assert spec.reported_epsilon is not None, spec.name


def test_every_spec_with_units_has_its_canary_first_middle_and_last(
    all_specs):
  # A spec whose canary can sit at several units is audited at each of
  # them (a bug that reads slot i as unit i shows at some positions only).
  groups = {}
  for spec in all_specs.values():
    if spec.position is not None and not spec.broken:
      groups.setdefault(group(spec.name), set()).add(spec.position)
  assert {"dpsgd", "trainer_ghost", "fedsgd_server", "fedsgd_local",
          "fedsgd_participant", "fedsgd_distributed", "dp_pca",
          "features_dpsgd", "features_data_norm", "rff_dpsgd",
          "rff_output_perturbation", "objective_perturbation_huber",
          "objective_perturbation_logistic", "output_perturbation",
          "feddpdr_participant", "dpwss_private_transcript_i",
          "dpwss_private_transcript_j"} <= set(groups)
  for name, positions in groups.items():
    assert positions == set(POSITIONS), name


# Claims whose data has no units to place a canary among: one scalar
# query (the noise samplers' specs) or one count (the tuning's).
UNITLESS = {"gaussian", "laplace", "discrete_gaussian", "discrete_laplace",
            "exponential", "tuning_laplace", "tuning_poisson",
            "tuning_negative_binomial", "tuning_logarithmic"}


def test_every_claim_on_units_is_audited_at_positions(all_specs):
  # A spec that claims an ε for data of several units has positions
  # (a new one without them fails here unless its data has no units).
  flat = {name for name, spec in all_specs.items()
          if not spec.broken and spec.reported_epsilon is not None
          and spec.position is None}
  assert flat == UNITLESS


def test_a_module_without_specs_or_a_duplicate_name_is_refused(
    monkeypatch):
  gaussian = importlib.import_module("dpcore.noise_audit").gaussian_spec()
  monkeypatch.setattr(audit_script, "audit_modules",
                      lambda: ["dpcore.noise_audit", "dpcore.audit_spec"])
  with pytest.raises(TypeError, match="dpcore.audit_spec has no specs"):
    audit_script.specs()
  fake = type(sys)("fake_audit")
  fake.specs = lambda: [gaussian]
  monkeypatch.setitem(sys.modules, "fake_audit", fake)
  monkeypatch.setattr(audit_script, "audit_modules",
                      lambda: ["dpcore.noise_audit", "fake_audit"])
  with pytest.raises(ValueError, match="'gaussian' is built by both "
                     "dpcore.noise_audit and fake_audit"):
    audit_script.specs()


# Products traced before a bound is enforced, which may keep the
# platform's default precision (dpcore.linalg's module docstring):
PRODUCTS_BEFORE_THE_BOUND = {
    # a model's forward pass: the clip is computed from what it gives (the
    # per-example gradients, or ghost clipping's layer inputs and output
    # gradients, whose norms and weighted sums are exact)
    "dpcore/ghost.py:Layers.dense",
    "mechanisms/lvq/model.py:_expanded_distances",  # G(M)LVQ's, vmap path
    # cos(xW + b)·√(2/D): bounded whatever the product's rounding
    "mechanisms/svm/random_features.py:features",
    # a participant's rows projected on a basis, clipped afterwards
    "federated/feddpdr/stages.py:_fit",
    # DPWSS's scores, clipped to [0, 1] afterwards ("private")
    "mechanisms/svm/kernels.py:kernel_matrix",
}


def test_every_mechanism_sums_its_bounded_rows_at_full_precision(spec_list):
  # Every mode's program, traced at JAX's default precision: a float32
  # product below full precision is one the list above explains.
  unexplained, seen = {}, set()
  for spec in spec_list:
    if spec.broken or spec.position not in (None, "first"):
      continue
    with jax.enable_x64(spec.x64):
      data = jax.tree.map(jnp.asarray, spec.data_0)
      found = products.below_full_precision(spec.mechanism,
                                            jax.random.key(0), data)
    seen |= set(found)
    extra = set(found) - PRODUCTS_BEFORE_THE_BOUND
    if extra:
      unexplained[spec.name] = sorted(extra)
  assert not unexplained, unexplained
  # No stale entry: each is traced by some audited mode.
  assert seen == PRODUCTS_BEFORE_THE_BOUND, PRODUCTS_BEFORE_THE_BOUND - seen


def test_script_writes_json_line_and_table(tmp_path):
  out = tmp_path / "audit.jsonl"
  table = tmp_path / "audit.md"
  proc = subprocess.run(
      [sys.executable, "-m", "launch.audit", "--only=laplace",
       "--trials=4000", "--seed=3", f"--out={out}", f"--table={table}"],
      cwd=_REPO, env={**os.environ, "JAX_PLATFORMS": "cpu"},
      capture_output=True, text=True, timeout=1800)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = out.read_text().splitlines()
  assert len(lines) == 1
  record = json.loads(lines[0])
  assert record["name"] == "laplace"
  assert record["trials"] == 4_000 and record["seed"] == 3
  assert record["verdict"] == "ok"
  assert 0.0 < record["epsilon_lower"] <= record["claim"]["epsilon"]
  assert record["claim"]["epsilon"] == pytest.approx(1.0)  # the ledger's
  assert "reported_epsilon" not in record and "delta" not in record
  # The audit releases nothing: the one record, claiming no guarantee.
  assert tuple(record["privacy"]) == accounting.PRIVACY_FIELDS
  assert record["privacy"]["epsilon"] is None
  assert record["privacy"]["no_guarantee"] == audit_script.AUDIT_ONLY
  page = table.read_text()
  assert "| laplace | add_remove |" in page
  assert "python -m launch.audit" in page
  assert f"{record['epsilon_lower']:.3f}" in page
  assert "Incomplete" not in page  # the one spec asked for ran


def test_a_page_of_some_specs_says_it_is_incomplete(tmp_path):
  record = {"name": "laplace", "broken": False, "backend": "cpu",
            "relation": "add_remove", "settings": {}, "verdict": "ok",
            "claim": {"epsilon": 1.0, "delta": 0.0, "epsilon_nominal": None},
            "epsilon_lower": 0.9, "trials": 10, "seconds": 1.0,
            "exceeds_nominal": False}
  page = tmp_path / "page.md"
  audit_script.write_page(str(page), [record], command="c", seed=0, total=3)
  assert "**Incomplete: 1 of 3 specs so far**" in page.read_text()
  audit_script.write_page(str(page), [record], command="c", seed=0, total=1)
  assert "Incomplete" not in page.read_text()


def test_a_violation_fails_the_run(tmp_path, monkeypatch):
  # An unbroken spec whose claim is wrong (the σ-halved mechanism reported
  # with the correct σ's ε) must be flagged (launch.audit then exits 1).
  wrong = dataclasses.replace(noise_audit.gaussian_spec(broken=True),
                              name="wrong_claim", broken=False)
  monkeypatch.setattr(audit_script, "specs", lambda until=None: [wrong])
  out = tmp_path / "audit.jsonl"
  (record,) = audit_script.run_audits(trials=20_000, out=str(out),
                                      table="")
  assert audit_spec.failed(record)
  assert json.loads(out.read_text())["verdict"] == "VIOLATION"


@pytest.mark.slow
def test_every_spec_at_its_default_trials(all_specs):
  failures = []
  for spec in all_specs.values():
    record = audit_script.run_one(spec, seed=0, trials=None, chunk=100_000)
    if audit_spec.failed(record):
      failures.append(record)
  assert not failures, failures


@pytest.mark.parametrize("package", audit_script.PACKAGES)
def test_audit_modules_import_only_downwards(package):
  # An audit module sits in its mechanism's layer and imports from it and
  # below (dpcore → mechanisms → federated → launch), never from above.
  above = {"dpcore": ("mechanisms", "federated", "launch"),
           "mechanisms": ("federated", "launch"),
           "federated": ("launch",)}[package]
  modules = [m for m in sorted(EXPECTED) if m.split(".")[0] == package]
  code = ("import importlib, sys\n"
          f"for name in {modules!r}:\n"
          "  importlib.import_module(name)\n"
          f"print(sorted(m for m in sys.modules if m.split('.')[0] in "
          f"{above!r}))\n")
  done = subprocess.run([sys.executable, "-c", code], cwd=_REPO,
                        capture_output=True, text=True, check=False,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert done.returncode == 0, done.stderr[-1500:]
  assert done.stdout.split() == ["[]"], done.stdout
