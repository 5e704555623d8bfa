"""``with_settings`` (a layout with another micro batch, recompute, ZeRO stage and virtual pipeline, not validated
again) equals validating the fields from scratch, for valid and refused combinations alike; ``validated_layout``
equals ``Layout(**fields)``."""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from engine.scaleout.layout import Layout, Recompute, Schedule, validated_layout, with_settings

BASES = [
    dict(tensor_parallel=2, pipeline_parallel=4, data_parallel=2, sequence_parallel=True, global_batch_size=64),
    dict(data_parallel=8, zero=3, global_batch_size=48),  # PP 1: no virtual pipeline
    dict(pipeline_parallel=2, data_parallel=3, context_parallel=2, expert_parallel=3, global_batch_size=36),
    dict(pipeline_parallel=2, data_parallel=2, schedule=Schedule.GPIPE, micro_batch_size=2),  # no global batch
    dict(pipeline_parallel=2, virtual_pipeline=2, data_parallel=2, layers_per_stage=(4, 4), global_batch_size=8,
         recompute="full", recompute_layers=1),
]
# Settings the validators accept and refuse: micro batches not dividing the batch, ZeRO 2, v on PP 1, out of range,
# and values Layout would coerce (a float micro batch, a recompute named by its string).
SETTINGS = list(itertools.product((1, 2, 3, 4, 8, 0, 2.0), (*Recompute, "full"), (0, 1, 2, 3), (1, 2, 65)))


def _errors(exc: ValidationError) -> list[tuple]:
    return [(e["type"], e["loc"], e["msg"]) for e in exc.errors()]


def _fresh(base: dict, mb, rec, zero, v) -> Layout:
    fields = {k: val for k, val in base.items() if k != "schedule"}
    return Layout(**{**fields, "micro_batch_size": mb, "recompute": rec, "zero": zero, "virtual_pipeline": v})


@pytest.mark.parametrize("base", BASES, ids=range(len(BASES)))
def test_with_settings_equals_validating_from_scratch(base):
    layout = Layout(**base)
    checked = refused = 0
    for mb, rec, zero, v in SETTINGS:
        try:
            expected = _fresh(base, mb, rec, zero, v)
        except ValidationError as exc:
            with pytest.raises(ValidationError) as got:
                with_settings(layout, mb, rec, zero, v)
            assert _errors(got.value) == _errors(exc)
            refused += 1
            continue
        derived = with_settings(layout, mb, rec, zero, v)
        assert derived == expected and derived.model_fields_set == expected.model_fields_set
        assert derived.__dict__ == expected.__dict__ and type(derived.micro_batch_size) is int
        checked += 1
    assert checked and refused  # both paths taken for every base


def test_validated_layout_equals_layout():
    for base in BASES:
        fields = dict(base)
        assert validated_layout(fields) == Layout(**fields)
        assert validated_layout(fields).model_fields_set == Layout(**fields).model_fields_set
    bad = dict(pipeline_parallel=1, virtual_pipeline=2)
    with pytest.raises(ValidationError) as got:
        validated_layout(bad)
    with pytest.raises(ValidationError) as want:
        Layout(**bad)
    assert _errors(got.value) == _errors(want.value)
