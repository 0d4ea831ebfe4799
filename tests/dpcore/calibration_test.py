"""Tests for dpcore.calibration against dp_accounting and the closed forms."""

import math

import dp_accounting
import pytest
from dp_accounting.pld import privacy_loss_distribution

from dpcore import accounting, calibration

# (epsilon, delta, sensitivity); small, moderate and large epsilon.
GRID = [
    (0.05, 1e-6, 1.0),
    (0.5, 1e-5, 1.0),
    (1.0, 1e-5, 2.0),
    (3.0, 1e-8, 0.5),
    (20.0, 1e-3, 1.0),
]


def test_laplace_scale_is_sensitivity_over_epsilon():
  assert calibration.laplace_scale(epsilon=0.5, sensitivity=2.0) == 4.0
  assert calibration.laplace_scale(epsilon=4.0, sensitivity=1.0) == 0.25


def test_classic_formula():
  got = calibration.gaussian_sigma_classic(epsilon=0.5, delta=1e-5,
                                           sensitivity=3.0)
  want = 3.0 * math.sqrt(2.0 * math.log(1.25 / 1e-5)) / 0.5
  assert got == pytest.approx(want, rel=1e-14)


@pytest.mark.parametrize("epsilon", [1.0, 1.5, 10.0])
def test_classic_refuses_large_epsilon_and_points_to_analytic(epsilon):
  with pytest.raises(ValueError, match="epsilon") as err:
    calibration.gaussian_sigma_classic(epsilon=epsilon, delta=1e-5,
                                       sensitivity=1.0)
  assert "gaussian_sigma_analytic" in str(err.value)


@pytest.mark.parametrize("epsilon,delta,sensitivity", GRID)
def test_analytic_matches_dp_accounting(epsilon, delta, sensitivity):
  got = calibration.gaussian_sigma_analytic(
      epsilon=epsilon, delta=delta, sensitivity=sensitivity)
  # dp_accounting's σ is for sensitivity 1; σ scales linearly with Δ.
  want = sensitivity * dp_accounting.get_sigma_gaussian(epsilon, delta)
  # Both solve the same equation to ~1e-12; 1e-9 leaves room for brentq.
  assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("epsilon,delta,sensitivity", GRID[1:4])
def test_analytic_matches_pld_of_gaussian_mechanism(epsilon, delta,
                                                    sensitivity):
  sigma = calibration.gaussian_sigma_analytic(
      epsilon=epsilon, delta=delta, sensitivity=sensitivity)
  pld = privacy_loss_distribution.from_gaussian_mechanism(
      sigma, sensitivity=sensitivity)
  # The PLD's δ(ε) at our σ is the target (its discretisation error is far
  # below 1e-6 relative for one Gaussian) ...
  assert pld.get_delta_for_epsilon(epsilon) == pytest.approx(delta, rel=1e-6)
  assert pld.get_epsilon_for_delta(delta) == pytest.approx(epsilon, rel=1e-6)
  # ... and 3 % less noise is measurably not (ε, δ)-DP: σ is not loose.
  smaller = privacy_loss_distribution.from_gaussian_mechanism(
      0.97 * sigma, sensitivity=sensitivity)
  assert smaller.get_delta_for_epsilon(epsilon) > 1.3 * delta


def test_analytic_known_value():
  # ε = 1, δ = 1e-5, Δ = 1: σ ≈ 3.7306 (Balle & Wang's analytic Gaussian;
  # the same figure dp_accounting and Google's DP library give), well
  # below the classic formula's 4.8448 evaluated (invalidly) at ε = 1.
  sigma = calibration.gaussian_sigma_analytic(epsilon=1.0, delta=1e-5,
                                              sensitivity=1.0)
  assert sigma == pytest.approx(3.73063, abs=1e-5)
  assert sigma < math.sqrt(2.0 * math.log(1.25 / 1e-5))


@pytest.mark.parametrize("epsilon,delta,sensitivity", GRID)
def test_analytic_rounds_up(epsilon, delta, sensitivity):
  sigma = calibration.gaussian_sigma_analytic(
      epsilon=epsilon, delta=delta, sensitivity=sensitivity)
  at = calibration.gaussian_delta(sigma=sigma, epsilon=epsilon,
                                  sensitivity=sensitivity)
  below = calibration.gaussian_delta(sigma=sigma * (1 - 1e-9),
                                     epsilon=epsilon,
                                     sensitivity=sensitivity)
  assert at <= delta < below


def test_gaussian_delta_large_epsilon_does_not_overflow():
  # e^800 overflows a float; the log-space evaluation must not.
  d = calibration.gaussian_delta(sigma=0.05, epsilon=800.0)
  assert math.isfinite(d) and 0.0 <= d < 1e-6
  sigma = calibration.gaussian_sigma_analytic(epsilon=200.0, delta=1e-5,
                                              sensitivity=1.0)
  assert math.isfinite(sigma) and 0.0 < sigma < 0.1


def test_analytic_below_classic_where_classic_is_valid():
  for epsilon in (0.1, 0.5, 0.9):
    kw = dict(epsilon=epsilon, delta=1e-5, sensitivity=1.0)
    assert (calibration.gaussian_sigma_analytic(**kw)
            < calibration.gaussian_sigma_classic(**kw))


def test_dispatch():
  kw = dict(epsilon=0.5, delta=1e-5, sensitivity=1.0)
  assert calibration.gaussian_sigma(**kw) == (
      calibration.gaussian_sigma_analytic(**kw))
  assert calibration.gaussian_sigma(**kw, method="classic") == (
      calibration.gaussian_sigma_classic(**kw))
  with pytest.raises(ValueError, match="method"):
    calibration.gaussian_sigma(**kw, method="exact")


@pytest.mark.parametrize("fn", [
    calibration.gaussian_sigma_classic, calibration.gaussian_sigma_analytic])
@pytest.mark.parametrize("kwargs,name", [
    (dict(epsilon=0.0, delta=1e-5, sensitivity=1.0), "epsilon"),
    (dict(epsilon=-1.0, delta=1e-5, sensitivity=1.0), "epsilon"),
    (dict(epsilon=math.nan, delta=1e-5, sensitivity=1.0), "epsilon"),
    (dict(epsilon=0.5, delta=0.0, sensitivity=1.0), "delta"),
    (dict(epsilon=0.5, delta=1.0, sensitivity=1.0), "delta"),
    (dict(epsilon=0.5, delta=1e-5, sensitivity=0.0), "sensitivity"),
    (dict(epsilon=0.5, delta=1e-5, sensitivity=math.inf), "sensitivity"),
])
def test_bad_arguments_are_named(fn, kwargs, name):
  with pytest.raises(ValueError, match=name):
    fn(**kwargs)


def test_laplace_bad_arguments_are_named():
  with pytest.raises(ValueError, match="epsilon"):
    calibration.laplace_scale(epsilon=0.0, sensitivity=1.0)
  with pytest.raises(ValueError, match="sensitivity"):
    calibration.laplace_scale(epsilon=1.0, sensitivity=-1.0)


def test_huge_epsilon_is_refused_in_one_line_and_delta_does_not_overflow():
  # δ(ε) at an ε where e^ε overflows a double: 0, not an OverflowError.
  assert calibration.gaussian_delta(sigma=1.0, epsilon=800.0) == 0.0
  assert calibration.gaussian_delta(sigma=1.0, epsilon=1.0) > 0.0
  for call in (
      lambda: calibration.gaussian_sigma_analytic(epsilon=1e300, delta=1e-5,
                                                  sensitivity=1.0),
      lambda: accounting.calibrate_dpsgd_noise(epsilon=2e6, delta=1e-5,
                                               sampling_rate=0.1, steps=10)):
    with pytest.raises(ValueError, match="beyond what the calibrations"):
      call()
  # The largest accepted ε still calibrates.
  assert calibration.gaussian_sigma_analytic(
      epsilon=calibration.MAX_EPSILON, delta=1e-5, sensitivity=1.0) > 0


def test_bisect_keeps_the_bracket_and_stops_where_told():
  tested = []

  def below(x):
    tested.append(x)
    return x < 0.3

  lo, hi = calibration.bisect(below, 0.0, 1.0, rtol=2.0 ** -10)
  assert lo < 0.3 <= hi and hi - lo <= 2.0 ** -10 * hi
  # Arithmetic midpoints: the first three are 1/2, 1/4, 3/8.
  assert tested[:3] == [0.5, 0.25, 0.375]
  tested.clear()
  lo, hi = calibration.bisect(below, 0.0, 1.0, steps=7)
  assert len(tested) == 7 and hi - lo == 2.0 ** -7 and lo < 0.3 <= hi
  # Steps and rtol together: whichever is first.
  tested.clear()
  calibration.bisect(below, 0.0, 1.0, rtol=1e-12, steps=5)
  assert len(tested) == 5


def test_bisect_geometric_halves_the_log_bracket():
  tested = []

  def below(x):
    tested.append(x)
    return x < 3.0

  lo, hi = calibration.bisect(below, 1.0, 16.0, rtol=1e-9, geometric=True)
  assert tested[:2] == [4.0, 2.0]
  assert lo < 3.0 <= hi and hi / lo - 1.0 <= 1e-9
  with pytest.raises(ValueError, match="rtol, steps or both"):
    calibration.bisect(below, 1.0, 2.0)
