"""Modules that moved into the stage folders stay importable from ``pipeline`` by their old name."""

import importlib
import os
import warnings

import pytest

import pipeline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("old", sorted(pipeline._MOVED))
def test_old_name_gives_the_moved_module_with_a_deprecation_warning(old):
    new = pipeline._MOVED[old]
    assert not os.path.exists(os.path.join(ROOT, "pipeline", f"{old}.py"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = getattr(pipeline, old)
    assert module is importlib.import_module(new)
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        f"pipeline.{old} is now {new}: import it from there"]


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'pipeline' has no attribute 'decoder'"):
        pipeline.decoder  # pylint: disable=pointless-statement
