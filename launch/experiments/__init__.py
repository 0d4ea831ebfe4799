"""Experiment harnesses behind the launch scripts: sweeps, cross-validation,
timing and the JSON records. Library code does not import from here."""
