"""engine.memo.by_identity: one computation per object, none shared between equal but distinct objects, errors not
cached."""

from __future__ import annotations

import pytest

from engine.memo import by_identity
from engine.model.build import architecture_from_config
from engine.model.catalog import catalog_model


def test_computed_once_per_object_and_not_for_an_equal_copy():
    calls = []

    @by_identity(size=4)
    def twice(obj: tuple) -> int:
        calls.append(obj)
        return 2 * sum(obj)

    a, b = (1, 2), tuple([1, 2])  # equal, distinct objects
    assert (twice(a), twice(a), twice(b)) == (6, 6, 6)
    assert len(calls) == 1 + (a is not b)
    twice.cache_clear()
    assert twice(a) == 6 and len(calls) == 2 + (a is not b)


def test_errors_are_not_cached_and_the_size_bounds_the_cache():
    calls = []

    @by_identity(size=2)
    def check(obj: list) -> int:
        calls.append(1)
        if not obj:
            raise ValueError("empty")
        return len(obj)

    empty = []
    for _ in range(2):
        with pytest.raises(ValueError):
            check(empty)
    assert len(calls) == 2
    kept = [[1], [1, 2], [1, 2, 3]]
    assert [check(x) for x in kept] == [1, 2, 3]
    assert check(kept[2]) == 3 and len(calls) == 5  # the third filled the cleared cache: still cached


def test_parameter_counts_are_a_copy_of_the_cached_sums():
    """Architecture.parameter_counts is cached per architecture; a caller mutating its dict changes nothing. Llama
    3.2 1B: 1,235,814,400 parameters (tied embeddings once; the model card's 1.23B)."""
    arch = architecture_from_config(catalog_model("meta-llama/Llama-3.2-1B").config)
    counts = arch.parameter_counts
    counts["total"] = 0
    assert arch.total_parameters == arch.parameter_counts["total"] == 1_235_814_400
