"""Audit specs of DPWSS's selection transcript (:mod:`mechanisms.svm.dpwss`).

Two modes of :mod:`mechanisms.svm.dpwss` (``make_plan(selection=…)``),
audited on small problems where one row (the canary) changes between D and
D′ (replace-one, l public):

* The paper's selection (``reported_epsilon=None``: the library makes no
  claim for it; ``nominal_epsilon`` is the paper's figure for the run).
  Two weaknesses, each with its own canary:

  - *j's candidate set reads the labels.* At α = 0 the j-candidates are
    exactly the rows labelled −1. The canary is a copy of a positive row
    (row 1) placed at index 0: labelled −1 in D it is a j-candidate at the
    first step; labelled +1 in D′ it ties forever with its twin (same row,
    same label, so the same gradient), ties go to the last index, and
    with C above every α the twin never leaves I_up — so the canary is
    never selected at all. Statistic: whether index 0 was ever selected.
  - *i is deterministic.* At α = 0 every positive row violates equally and
    ties go to the last index, so a canary at the last index labelled +1
    is i at the first step with probability 1 (in D′, labelled −1, it is
    not in I_up). Statistic: whether the first i is the canary.

  With one selection (``max_iter=1``) at the paper's ε = 0.05, and for a
  whole run at ε = 1 (the paper's exits), both audit far above the nominal
  figure: the loss is unbounded, so the bound grows with the trials.
* The private selection (:class:`mechanisms.svm.wss.PrivateWSS`): the same
  two canaries, each first, in the middle and last
  (``dpwss_private_transcript_j@first`` …), T iterations,
  ``reported_epsilon`` from the ledger's composition of the 2T draws (the
  plan's ``record``); the audit must come out below it.
* Its broken variant ``dpwss_private_transcript_i_support_masked``
  (:class:`SupportMaskedWSS`): the private selection with the rows
  outside I_up (for i) and I_low (for j) masked out of the exponential
  mechanism instead of floored at score 0, reported with the private
  plan's ε. The last-row canary, labelled −1 in D′, is then never the
  first i there, and is with probability ¼ in D; the audit must find a
  bound above the claim. (Here a canary's row says which draw it probes,
  i or j, not a padding slot: the masked I_up shows at the first i.)

What the private specs can and cannot catch: each reads one draw (the
first i, or whether the canary is ever picked) against the claim for the
whole transcript of 2T draws, so a bound far below the claim is the
expected outcome, and the broken variant they catch is one of support.
The scale of the draws (exp(ε·s/2), Δ = 1) is checked where it is
sharp: the single-draw audit of the exponential mechanism
(:mod:`dpcore.noise_audit`, with its sensitivity-halved variant) and the
law test of :class:`mechanisms.svm.wss.PrivateWSS`'s draws, which rejects
0.7ε and 1.5ε; the count of 2T draws is the plan's record, tested.

Mechanisms run the library's solver (:func:`mechanisms.svm.smo.solve`) in
float32, vmapped over keys by :func:`dpcore.auditing.audit`.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from dpcore.audit_spec import (
  POSITIONS,
  AuditSpec,
  canary_index,
  check_variant,
  claimed_epsilon,
  spec_name,
)
from mechanisms.svm import dpwss, kernels, smo, wss

DELTA = 1e-5
GAMMA = 0.5
C = 10.0  # above every α these separable problems reach (tested)
BROKEN = ("support_masked",)


def canary_data(probe: str, position: str):
  """(x, y_D′, y_D, canary index) of an 8-row, 2-feature problem.

  Positives near (1, 1), negatives near (−1, −1) (fixed points, no
  randomness), and the canary inserted at ``position`` (one of
  :data:`dpcore.audit_spec.POSITIONS`). ``probe="j"``: the canary is a
  copy of the first positive, labelled +1 in D′ and −1 in D; ``"i"``: it
  is (1, 1), labelled −1 in D′ and +1 in D. Only the canary's label
  differs between D′ (``y_0``) and D (``y_1``). The paper's weaknesses
  need the j-canary first and the i-canary last (module docstring).
  """
  if probe not in ("i", "j"):
    raise ValueError(f"probe must be 'i' or 'j', got {probe!r}.")
  pos = np.array([[1.0, 1.2], [1.3, 0.8], [0.7, 1.1]], np.float32)
  neg = np.array([[-1.0, -1.1], [-1.2, -0.7], [-0.8, -1.3],
                  [-1.4, -1.0]], np.float32)
  others = np.concatenate([pos, neg])
  labels = np.array([1] * 3 + [-1] * 4, np.float32)
  canary = canary_index(len(others) + 1, position)
  row, label_0 = (pos[0], 1.0) if probe == "j" else ((1.0, 1.0), -1.0)
  x = np.insert(others, canary, row, axis=0).astype(np.float32)
  y_0 = np.insert(labels, canary, label_0)
  y_1 = y_0.copy()
  y_1[canary] = -label_0
  return x, y_0, y_1, canary


@dataclasses.dataclass(frozen=True)
class SupportMaskedWSS(wss.PrivateWSS):
  """:class:`wss.PrivateWSS` with a data-dependent support (broken).

  The same scores, ε and Δ = 1, but the invalid rows — outside I_up for
  i, outside I_low or already paired with i for j — are masked out of the
  exponential mechanism, as the paper's rule masks its candidates,
  instead of keeping the floor score 0. The proof's step 3 (the support is
  all l indices for every D) fails: a row whose label moves it out of
  I_up can never be drawn as i under one neighbour and can under the
  other, an unbounded privacy loss.
  """
  name = "private_dpwss_support_masked"

  def _first_support(self, in_up):
    return in_up

  def _second_support(self, in_low, seen):
    return in_low & ~seen


def transcript_mechanism(*, selection: str, epsilon: float, sigma: float,
                         max_iter: int, broken: str | None = None):
  """``(key, (x, y)) -> pairs``: one DPWSS run's (max_iter', 2) record.

  Unused rows of the record are −1. ``selection`` is ``"paper"`` or
  ``"private"``. ``broken``: None, or ``"support_masked"``
  (:data:`BROKEN`; private selection only): the rule is
  :class:`SupportMaskedWSS`.
  """
  dpwss.check_selection(selection)
  check_variant(broken, BROKEN)
  if broken is not None and selection != "private":
    raise ValueError(f"broken={broken!r} breaks the private selection; "
                     f"the paper's selection ({selection!r}) makes no "
                     f"claim to break.")
  spec = kernels.KernelSpec("rbf", gamma=GAMMA).resolve(2)
  config = smo.SolverConfig(kernel=spec)
  if broken == "support_masked":
    rule_class = SupportMaskedWSS
  else:
    rule_class = wss.PrivateWSS if selection == "private" else wss.DPWSS
  rule = rule_class(buffer_rows=max_iter, pair_flags="bits")

  def mechanism(key, data):
    x, y = data
    problem = smo.make_problem(spec, x, y, dtype="float32", precompute=True,
                               row_dtype="float32")
    params = smo.SolverParams(
        jnp.float32(C), jnp.float32(1e-3), jnp.int32(max_iter),
        wss.DPWSSParams(jnp.float32(epsilon), jnp.float32(sigma)))
    return smo.solve(key, problem, params, config=config, rule=rule).pairs

  return mechanism


def ever_selected(canary: int):
  """Statistic: 1 when ``canary`` appears anywhere in the transcript."""
  def statistic(pairs):
    return jnp.any(pairs == canary).astype(jnp.float32)
  return statistic


def first_i_is(canary: int):
  """Statistic: 1 when the first selected i is ``canary``."""
  def statistic(pairs):
    return (pairs[0, 0] == canary).astype(jnp.float32)
  return statistic


def _spec(name, *, selection, position, statistic, epsilon, sigma, max_iter,
          trials, nominal=None, broken=None, named_position=False):
  mechanism = transcript_mechanism(selection=selection, epsilon=epsilon,
                                   sigma=sigma, max_iter=max_iter,
                                   broken=broken)
  probe = "i" if statistic is first_i_is else "j"
  x, y_0, y_1, canary = canary_data(probe, position)
  reported = None
  if selection == "private":  # the correct private plan's claim
    plan = dpwss.make_plan(selection_epsilon=epsilon, sigma=sigma,
                           delta=DELTA, selection="private",
                           max_iter=max_iter)
    reported = claimed_epsilon(plan.report(), "replace_one")
  return AuditSpec(
      name=spec_name(name, position) if named_position else name,
      position=position if named_position else None,
      relation="replace_one",
      settings={"selection": selection, "epsilon_per_selection": epsilon,
                "sigma": sigma, "max_iter": max_iter, "rows": int(len(y_0)),
                "canary": canary, "canary_label_D": float(y_1[canary]),
                "canary_label_D_prime": float(y_0[canary]), "c": C,
                "gamma": GAMMA,
                "statistic": statistic.__name__,
                "variant": broken or "library"},
      mechanism=mechanism,
      data_0=(jnp.asarray(x), jnp.asarray(y_0)),
      data_1=(jnp.asarray(x), jnp.asarray(y_1)),
      statistic=statistic(canary), delta=DELTA, reported_epsilon=reported,
      nominal_epsilon=nominal, default_trials=trials,
      broken=broken is not None)


def specs() -> list[AuditSpec]:
  """The DPWSS audits (paper's selection: no claim; private: the ledger),
  then the private selection's broken variant."""
  paper_max_iter = 200  # the 8-row runs exit in far fewer iterations
  return [
      _spec("dpwss_paper_one_selection_j", selection="paper",
            position="first", statistic=ever_selected, epsilon=0.05,
            sigma=0.5, max_iter=1, trials=100_000, nominal=0.05),
      _spec("dpwss_paper_one_selection_i", selection="paper",
            position="last", statistic=first_i_is, epsilon=0.05, sigma=0.5,
            max_iter=1, trials=100_000, nominal=0.05),
      _spec("dpwss_paper_transcript_j", selection="paper", position="first",
            statistic=ever_selected, epsilon=1.0, sigma=0.5,
            max_iter=paper_max_iter, trials=100_000, nominal=1.0),
      _spec("dpwss_paper_transcript_i", selection="paper", position="last",
            statistic=first_i_is, epsilon=1.0, sigma=0.5,
            max_iter=paper_max_iter, trials=100_000, nominal=1.0),
      *(_spec(f"dpwss_private_transcript_{probe}", selection="private",
              position=position, statistic=statistic, epsilon=1.0,
              sigma=0.5, max_iter=5, trials=100_000, named_position=True)
        for probe, statistic in (("j", ever_selected), ("i", first_i_is))
        for position in POSITIONS),
      # Never the first i under D′: the bound is limited by the trials
      # alone, log(¼·trials/2 / 3.7) ≈ 9.5 > 8.08 at 400,000.
      _spec("dpwss_private_transcript_i_support_masked",
            selection="private", position="last", statistic=first_i_is,
            epsilon=1.0, sigma=0.5, max_iter=5, trials=400_000,
            broken="support_masked"),
  ]


__all__ = ["BROKEN", "SupportMaskedWSS", "canary_data", "ever_selected",
           "first_i_is", "specs", "transcript_mechanism"]
