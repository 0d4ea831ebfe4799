"""dpcore.accounting: steps recorded by their RDP curve (record_rdp_curve)."""

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp as dp_rdp

from dpcore import accounting

ORDERS = np.arange(2, 257)


def _gaussian_curve(sigma):
  return ORDERS / (2.0 * sigma**2)


def _exact(sigma, delta, count=1):
  acc = dp_rdp.RdpAccountant(orders=ORDERS.astype(float).tolist())
  acc.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.GaussianDpEvent(sigma), count))
  return acc.get_epsilon(delta)


def test_a_gaussian_curve_gives_the_rdp_accountants_epsilon():
  ledger = accounting.PrivacyLedger()
  ledger.record_rdp_curve(orders=ORDERS, rdp=_gaussian_curve(3.0),
                          delta=1e-5, label="g", relation="add_remove")
  g = ledger.guarantee(1e-5)
  assert g.epsilon == pytest.approx(_exact(3.0, 1e-5), rel=1e-9)
  # The curve is converted at the δ asked for, not at the recorded one.
  tight = ledger.guarantee(1e-8)
  assert tight.method == "rdp"
  assert tight.epsilon == pytest.approx(_exact(3.0, 1e-8), rel=1e-9)


def test_curves_on_the_same_orders_compose_by_rdp():
  ledger = accounting.PrivacyLedger()
  for i in range(4):
    ledger.record_rdp_curve(orders=ORDERS, rdp=_gaussian_curve(3.0),
                            delta=1e-5, label=f"g{i}",
                            relation="add_remove")
  assert ledger.guarantee(1e-5).epsilon == pytest.approx(
      _exact(3.0, 1e-5, count=4), rel=1e-9)


def test_a_curve_beside_an_event_is_added_at_half_the_delta():
  ledger = accounting.PrivacyLedger(use_pld=False)
  ledger.record_rdp_curve(orders=ORDERS, rdp=_gaussian_curve(3.0),
                          delta=1e-5, label="curve", relation="add_remove")
  ledger.record_gaussian(sigma=3.0, sensitivity=1.0, delta=1e-5,
                         label="event", relation="add_remove")
  g = ledger.guarantee(1e-5)
  assert g.method == "rdp+basic"
  half = accounting._rdp_epsilon(
      [dp_accounting.GaussianDpEvent(3.0)], 0.5e-5)
  assert g.epsilon == pytest.approx(_exact(3.0, 0.5e-5) + half, rel=1e-9)


def test_truncation_keeps_the_total_delta():
  ledger = accounting.PrivacyLedger()
  ledger.record_rdp_curve(orders=ORDERS, rdp=_gaussian_curve(3.0),
                          delta=1e-5, label="curve", relation="add_remove")
  ledger.record_truncation(1e-8, label="padding")
  g = ledger.guarantee(1e-5)
  assert g.delta <= 1e-5 and g.truncation_probability == 1e-8
  assert g.epsilon > _exact(3.0, 1e-5)  # paid for with a smaller δ


@pytest.mark.parametrize("orders,rdp", [([1.0, 2.0], [0.1, 0.2]),
                                        ([3.0, 2.0], [0.1, 0.2]),
                                        ([2.0, 3.0], [0.1]),
                                        ([2.0, 3.0], [0.1, -1.0])])
def test_bad_curves_are_refused(orders, rdp):
  with pytest.raises(ValueError, match="orders"):
    accounting.PrivacyLedger().record_rdp_curve(
        orders=orders, rdp=rdp, delta=1e-5, label="x",
        relation="add_remove")
