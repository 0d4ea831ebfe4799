"""The two checks each audit module's test makes of its specs.

An unbroken spec's small audit must stay at or below the ε the library
reports, and reach a fair share of it (an audit without power would pass
any claim); a broken variant's must exceed the ε it is reported with.
Fixed keys: the bounds are deterministic.
"""

import jax

from dpcore import audit_spec


def assert_below_claim(spec, trials: int, *, seed: int = 11,
                       power: float = 0.5) -> None:
  """The lower bound lies in (power·ε, ε], ε the spec's reported one."""
  result = audit_spec.run(jax.random.key(seed), spec, trials=trials)
  assert result.epsilon_lower <= spec.reported_epsilon, (
      f"{spec.name}: lower bound {result.epsilon_lower:.4f} above the "
      f"reported {spec.reported_epsilon:.4f}")
  assert result.epsilon_lower > power * spec.reported_epsilon, (
      f"{spec.name}: lower bound {result.epsilon_lower:.4f} not above "
      f"{power} x the reported {spec.reported_epsilon:.4f}: no power")


def assert_caught(spec, trials: int, *, seed: int = 12) -> None:
  """A broken variant's lower bound exceeds the ε it is reported with."""
  result = audit_spec.run(jax.random.key(seed), spec, trials=trials)
  assert result.epsilon_lower > spec.reported_epsilon, (
      f"{spec.name}: lower bound {result.epsilon_lower:.4f} does not "
      f"exceed the reported {spec.reported_epsilon:.4f}: not caught")
