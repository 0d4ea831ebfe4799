"""FedDPDR-DPML (Wang et al. 2024, Algorithms 1–3) and its baselines.

N participants hold disjoint rows (a leading array axis, padded with a
mask; :mod:`federated.partition`). Rows must have ‖x‖ ≤ 1 (e.g. pixels/255
then per-row L2 normalisation). K classes are handled one-vs-rest
(:func:`mechanisms.erm.objective_perturbation.one_vs_rest`). Every
per-participant step is one ``vmap``; repeats (seeds) are a second ``vmap``
over keys, the data being shared.

Mechanisms and how each is evaluated (accuracy on the held-out test set,
test rows preprocessed like the training rows):

* ``feddpdr`` — FedDPDR-DPML. Each participant runs DP-PCA (ε₁, δ) on its
  rows; the server aggregates the bases (``aggregation``: ``"subspace"``,
  top-k of Σ wᵢÛᵢÛᵢᵀ, default; or ``"paper"``, (1/N)Σ wᵢÛᵢ as printed);
  or, with ``aggregation="moments"``, each participant sends the noisy
  matrix XᵢᵀXᵢ + Zᵢ of its DP-PCA instead of its top k, and the global
  basis is the top k of Σᵢ (XᵢᵀXᵢ + Zᵢ) (the plain sum: every Zᵢ has the
  same σ; see :func:`federated.aggregation.moments_aggregate`), no local
  basis being computed (``bases`` is then (N, 0, 0)); with
  ``"distributed_moments"`` the same sum is formed under secure
  aggregation, each participant adding a discrete Gaussian share
  (:mod:`federated.feddpdr.secure_moments`, d ≤ 361; ``Config.bits``
  per coordinate). Dropouts: ``Config.min_survivors`` (P_min ≤ P) is
  the protocol's threshold and the shares the sum is accounted at, and
  ``Config.dropouts`` simulates the last ``dropouts`` participants'
  messages never reaching the server (the sum is then the survivors';
  :func:`make_plan` refuses a run left with fewer than P_min). The
  dropout is of the secure sum's round only: the dropped participants
  still receive the global basis, fit their classifiers and enter the
  model average below;
  each participant projects its rows on the global basis, clips them to
  norm ≤ 1, and trains K objective-perturbation classifiers; the server
  averages the models (Σ wᵢβ̂ᵢ, or (1/N)Σ wᵢβ̂ᵢ with
  ``model_aggregation="paper"``). Evaluated: the global basis and global
  model on the test set.
* ``dpdr_dpml`` — DPDR-DPML, each participant alone: its own DP-PCA basis
  and its own private classifiers, no aggregation. Evaluated: each
  participant's (Ûᵢ, β̂ᵢ) on the whole test set; ``accuracy`` is the mean
  over participants (each participant's accuracy is also returned).
* ``dpml`` — DPML, objective perturbation on the full d dimensions, no
  reduction, each participant alone. There is no PCA step, so the whole ε
  goes to training. Evaluated like ``dpdr_dpml`` (mean over participants).
* ``nonpriv`` — Non-Priv: the FedDPDR pipeline with the noise off (σ = 0:
  exact PCA per participant; the same basis aggregation; fits with b = 0
  and θ = 0; the same model averaging), so its gap to ``feddpdr`` is the
  cost of privacy alone. It runs the ``feddpdr`` program itself, the
  noise switched off by its traced σ, θ and p (:func:`program`).
  Evaluated like ``feddpdr``.

Top k. ``topk="eigh"`` (default) finds every top-k basis exactly (DP-PCA
by ``eigh``, the server's aggregate by a thin SVD); ``topk="subspace"``
uses block subspace iteration for both
(:func:`mechanisms.pca.dp_pca.noisy_basis` and
:func:`federated.aggregation.subspace_aggregate`). Either is
post-processing of the noisy matrices; the server's start block comes from
:func:`server_key`, a stream no noise is drawn from.

The modules, one concern each: ``registry`` (the mechanisms described,
:data:`DESCRIPTIONS`), ``settings`` (:class:`Config`, :class:`Static`,
the checks, :func:`program`), ``plan`` (the shape: :func:`make_plan`,
the budget split and the ledger, :func:`release`), ``arrays`` (the
program's pytrees :class:`Rows`, :class:`Bucketed`, :class:`Traced`,
:class:`TrainOutput`), ``keys``, ``stages`` (one function per stage,
chosen by the mechanism's description), ``training`` (:func:`train`, the
one jitted program), ``evaluation``, ``arguments``
(:func:`train_arguments`, :func:`global_train_arguments`,
:func:`check_data`, :class:`TrainingJob`), ``memory``
(:func:`plan_chunk`), ``summary`` (:class:`Summary`) and ``pipeline``
(:func:`execute`, :func:`run`).

The shape (:mod:`dpcore.shape`): :func:`make_plan` calibrates a frozen
:class:`FedDPDRPlan` (ε, δ, the relation, every participant's σ, p, θ),
``plan.record(ledger)`` records one participant's releases, and
:func:`release` is the training release of the plan.

Privacy:
  Per participant, neighbouring data sets differ in one of its rows. DP-PCA
  has sensitivity 1 under add/remove (the paper's Lemma 4.1) and √2 under
  replacement, the relation objective perturbation is proven under. The
  run is always *accounted* under replacement (sensitivity √2), so one
  guarantee covers all of it; ``Config.relation`` only picks what σ is
  calibrated for: ``"replace_one"`` (default; the old spelling
  ``"replace"`` is accepted, :func:`dpcore.options.parse_relation`) or
  ``"add_remove"`` (the paper's calibration, reproduced; the reported ε is
  then larger than nominal).
  Objective perturbation is ε-DP per fit under replacement given ‖x‖ ≤ 1
  (enforced by clipping each projected row, which is per-row and
  data-independent) and a converged fit (‖∇J‖ ≤ ``tol``, whose gap to
  the exact minimiser the fit's gap noise covers; :func:`summarise`
  raises :class:`ConvergenceError` otherwise).
  Aggregation at the server is post-processing. The test set is public.
  ``aggregation="moments"`` releases each participant's noisy matrix
  XᵢᵀXᵢ + Zᵢ itself, which is exactly the Gaussian mechanism's output that
  DP-PCA's guarantee is about (its top k is post-processing of it): the
  same σ, the same ledger entry, the same privacy record as ``"subspace"``
  (:func:`make_plan` does not look at the aggregation); the server's sum and
  its top k are post-processing.
  ``aggregation="distributed_moments"`` (:mod:`.secure_moments`) releases
  only the secure sum of every participant's rounded upper(XᵢᵀXᵢ) plus its
  discrete Gaussian share: a replaced row moves it by ≤ 2Δ (rounded
  rows), and the sum of P_min shares (``min_survivors``, P without
  dropouts; more survivors only add noise) is calibrated to the same
  (ε₁, δ) against the server, given secure aggregation, recorded as an
  RDP curve (a dropped participant's rows are not in the sum, and its
  fits are accounted as every participant's); each
  participant's own guarantee should it fail (its share alone) is in the
  plan's ``secure_aggregation``.

"""

from federated.feddpdr.arguments import (
    TrainingJob,
    check_data,
    global_train_arguments,
    train_arguments,
)
from federated.feddpdr.arrays import Bucketed, Rows, Traced, TrainOutput
from federated.feddpdr.evaluation import evaluate
from federated.feddpdr.keys import (
    PROTOCOL_STREAM,
    SERVER_STREAM,
    participant_keys,
    protocol_keys,
    server_key,
)
from federated.feddpdr.memory import choose_chunk, memory_estimate, plan_chunk
from federated.feddpdr.pipeline import Outcome, execute, run
from federated.feddpdr.plan import (
    NOMINAL_NOTE,
    RELATION,
    FedDPDRPlan,
    check_converged,
    make_plan,
    release,
)
from federated.feddpdr.registry import (
    DESCRIPTIONS,
    Mechanism,
    describe,
)
from federated.feddpdr.settings import (
    Config,
    Program,
    Static,
    check_chunk,
    check_settings,
    program,
    secure_sum_of,
)
from federated.feddpdr.summary import ConvergenceError, Summary, summarise
from federated.feddpdr.training import train

__all__ = [
    "Bucketed", "Config", "ConvergenceError", "DESCRIPTIONS", "FedDPDRPlan",
    "Mechanism", "NOMINAL_NOTE", "Outcome", "PROTOCOL_STREAM", "Program",
    "RELATION", "Rows", "SERVER_STREAM", "Static", "Summary", "Traced",
    "TrainOutput", "TrainingJob", "check_chunk", "check_converged",
    "check_data",
    "check_settings", "choose_chunk", "describe", "evaluate", "execute",
    "global_train_arguments", "make_plan", "memory_estimate",
    "participant_keys", "plan_chunk", "program", "protocol_keys", "release",
    "run", "secure_sum_of", "server_key", "summarise", "train",
    "train_arguments",
]
