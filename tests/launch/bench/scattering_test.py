"""launch.bench.scattering: the floor runs the transform's FFTs."""

from launch.bench import scattering as bench


def test_bench_fft_plan_counts_the_transforms_ffts():
  plan = bench.fft_plan(28, 2, 8)
  inverse_at_output = sum(n for d, s, n in plan if d == "inv" and s == 9)
  assert inverse_at_output == 1 + 8 + 8 + 32  # order 0, 1 (two j1), 2
  assert ("inv", 18, 64) in plan and ("fwd", 36, 1) in plan
