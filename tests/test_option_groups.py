"""pipeline.config's option groups and OnError, and plan.op_seed: each group checks its own
fields with the factories' words, make_options maps the keywords onto the groups, and every
op seed comes from one derivation."""

import dataclasses

import pytest
import tensorflow as tf

from pipeline import config
from pipeline.deliver import plan


def test_each_image_option_belongs_to_exactly_one_group():
    names = [f.name for g in config.GROUPS.values() for f in dataclasses.fields(g)]
    assert sorted(names) == sorted(config.FIELDS)
    assert len(names) == len(set(names)) == len(config.FIELDS) >= 41


def test_make_options_fills_the_groups_with_the_checked_values():
    opts = config.make_options("from_directory", image_size=64, on_error="skip", max_errors=2,
                               dtype="float32", num_parallel_calls=tf.data.AUTOTUNE, seed=7)
    assert opts.geometry.image_size == opts.image_size == (64, 64)
    assert opts.errors == config.ErrorOptions(config.OnError.SKIP, 2)
    assert opts.on_error is config.OnError.SKIP and opts.on_error.skips
    assert opts.delivery.dtype == opts.dtype == tf.float32
    assert opts.runtime.autotune is True and opts.autotune is True
    assert opts.order.seed == 7 and opts.order.is_deterministic
    assert opts.geometry.dct_target == (64, 64)
    assert config.make_options(resize="pad").geometry.dct_target is None


def test_replace_checks_and_normalizes_the_groups_again():
    opts = dataclasses.replace(config.make_options(), on_error="skip", image_size=32)
    assert opts.on_error is config.OnError.SKIP and opts.errors.on_error is config.OnError.SKIP
    assert opts.geometry.image_size == (32, 32)
    with pytest.raises(ValueError, match=r"^`resize` must be one of"):
        dataclasses.replace(opts, resize="squash")


@pytest.mark.parametrize("group, kw, name", [
    (config.GeometryOptions, {"resize": "squash"}, "resize"),
    (config.DecodeOptions, {"channels": 2}, "channels"),
    (config.ErrorOptions, {"on_error": "ignore"}, "on_error"),
    (config.OrderOptions, {"subset": "training"}, "subset"),
    (config.ServiceOptions, {"job_name": "j"}, "job_name"),
    (config.MaskOptions, {"mask_pad_value": 256}, "mask_pad_value"),
])
def test_a_group_refuses_a_bad_value_with_the_factory_message(group, kw, name):
    with pytest.raises(ValueError) as from_group:
        group(**kw)
    with pytest.raises(ValueError) as from_factory:
        config.make_options(**kw)
    assert str(from_group.value) == str(from_factory.value)
    assert f"Received: {name}=" in str(from_group.value)


def test_on_error_is_a_policy_equal_to_its_string():
    skip = config.OnError.of("skip")
    assert skip is config.OnError.SKIP and skip == "skip" and repr(skip) == "'skip'"
    assert f"{skip}" == str(skip) == "skip"
    assert (skip.skips, skip.raises, skip.length_known) == (True, False, False)
    assert config.OnError.of(config.OnError.RAISE).length_known
    assert config.check_on_error("raise") is config.OnError.RAISE
    with pytest.raises(ValueError) as e:
        config.OnError.of("ignore")
    assert str(e.value) == ("`on_error` must be one of ['raise', 'skip']. "
                            "Received: on_error='ignore'")


def test_op_seed_is_the_seed_without_a_key_and_a_function_of_the_key_with_one():
    assert plan.op_seed(5) == 5 and plan.op_seed(None) is None
    key = tf.constant([3, 6], tf.int64)
    got = [int(plan.op_seed(5, key, s)) for s in
           (plan.ORDER, plan.RECORDS, plan.ELEMENTS, plan.CLASS_STREAMS, plan.CLASS_STREAMS + 1)]
    golden = 0x9E3779B97F4A7C15
    assert got == [3, 6, 3 ^ 6, 3 ^ (golden % 2 ** 63), 3 ^ (2 * golden % 2 ** 63)]
