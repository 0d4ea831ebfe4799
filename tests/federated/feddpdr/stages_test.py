"""Tests of federated.feddpdr.stages: the stages come from the table."""

import pytest

from dpcore import options
from federated import feddpdr
from federated.feddpdr import stages


@pytest.mark.parametrize("mechanism", sorted(feddpdr.DESCRIPTIONS))
@pytest.mark.parametrize("aggregation", list(options.Aggregation))
@pytest.mark.parametrize("model", list(options.ModelAggregation))
def test_every_program_has_its_stages(mechanism, aggregation, model):
  static = feddpdr.program(feddpdr.Config(
      mechanism=mechanism, aggregation=aggregation, model_aggregation=model))
  chosen = stages.choose(static)
  mech = static.description
  if not mech.reduces:
    assert chosen.bases is stages._no_bases
    assert chosen.fits is stages._fit_raw
  elif not mech.federated:
    assert chosen.bases is stages._own_bases
    assert chosen.fits is stages._fit_own
  else:
    assert chosen.bases is stages._SERVER_BASES[aggregation]
    assert chosen.fits is stages._fit_global
  assert chosen.model is (stages._MODELS[model] if mech.federated
                          else stages._no_model)


def test_the_stage_tables_cover_every_setting():
  assert set(stages._SERVER_BASES) == set(list(options.Aggregation))
  assert set(stages._MODELS) == set(list(options.ModelAggregation))
  described = {(m.reduces, m.federated)
               for m in feddpdr.DESCRIPTIONS.values()}
  assert described <= set(stages._BY_DESCRIPTION)
