"""mechanisms.svm.dpwss draws no subsample, so it has no sampling law.

Issue #33 asks for a law test at every call site that subsamples (rows or
participants). DPWSS is not one, in either selection:

* ``"private"`` (:class:`mechanisms.svm.wss.PrivateWSS`): every iteration
  scores all l rows (the shrinking mask is ignored: "every row is
  scored") and draws i, then j, by the exponential mechanism over all l
  indices; its guarantee is the composition of 2T such draws under
  replace-one neighbours, with no amplification by subsampling to
  account, hence no rate q whose law could be wrong.
* ``"paper"`` (:class:`mechanisms.svm.wss.DPWSS`): i is the largest
  violator, j an exponential-mechanism draw among the never-selected
  pairs; it carries no guarantee at all (the plan says so).

The SMO solver under both (:mod:`mechanisms.svm.smo`,
:mod:`~mechanisms.svm.smo_train`) works on the whole kernel matrix. The
randomness of the chain is the exponential mechanism's Gumbel draws, whose
laws are tested in ``tests/dpcore/exponential_test.py`` and at the call
site in ``dpwss_test.py``.

So the test here is the one that can fail when that changes: none of the
modules DPWSS runs calls a Poisson sampler or the DP-SGD trainer, or
imports them. A DPWSS that started to subsample would fail it, and would
then need a law test of its own (listed in ``tests.law.SITES``, which
``tests/law_test.py`` checks against every module that samples).
"""

import ast

import pytest

from tests import law

DPWSS_CHAIN = ["mechanisms/svm/dpwss.py", "mechanisms/svm/wss.py",
               "mechanisms/svm/smo.py", "mechanisms/svm/smo_train.py",
               "mechanisms/svm/kernels.py"]


def _imported_modules(path):
  tree = ast.parse(path.read_text(encoding="utf-8"))
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      names.update(f"{node.module}.{alias.name}" for alias in node.names)
  return names


@pytest.mark.parametrize("module", DPWSS_CHAIN)
def test_dpwss_chain_does_not_subsample(module):
  path = law.ROOT / module
  assert not law.sampling_calls(path), (
      f"{module} now subsamples ({law.sampling_calls(path)}): add a law "
      f"test that runs DPWSS and reads back the rows it used (issue #33)")
  samplers = {"dpcore.dpsgd", "dpcore.trainer"}
  assert not _imported_modules(path) & samplers, _imported_modules(path)
  assert module not in law.SITES
