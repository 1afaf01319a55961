"""pipeline.config: each option shared by several entry points has one validator, and every
entry point (the factories, write_tfrecords, from_npy_shards, from_generator, the capacity
plan, bench, the command line) says the same words for the same bad value."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf

import pipeline
from conftest import run_cli, solid
from pipeline import config
from pipeline.tools import capacity
from pipeline.tools.bench import harness as bench

SEED = "`seed` must be an int in [0, 2**63) or None. Received: seed="
ON_ERROR = "`on_error` must be one of ['raise', 'skip']. Received: on_error="
IMAGE_SIZE = ("`image_size` must be (height, width) of positive integers or None. "
              "Received: image_size=")


@pytest.fixture
def folder(tmp_path):
    for k in range(3):
        solid(str(tmp_path / "src" / ("a" if k < 2 else "b") / f"{k}.png"), 40 * k)
    return str(tmp_path / "src")


def _raises(fn, message):
    with pytest.raises(ValueError) as e:
        fn()
    assert str(e.value) == message
    return str(e.value)


def _cli_says(args, name, message):
    """The command's exit status is 2 and its first error line is the library's ``message``
    with the flag's name (``--name``) for the argument ``name``."""
    code, out, err = run_cli(*args, "--noprogress")
    assert code == 2, (args, out, err)
    flag = message.replace(f"`{name}`", f"--{name}").replace(f"Received: {name}=",
                                                             f"Received: --{name}=")
    assert err.splitlines()[0] == f"pipeline {args[0]}: error: {flag}", err


@pytest.mark.parametrize("seed", [-1, 2 ** 63])
def test_a_bad_seed_gets_one_message_everywhere(folder, tmp_path, seed):
    says = f"{SEED}{seed!r}"
    assert _raises(lambda: config.check_seed(seed), says)
    _raises(lambda: pipeline.from_directory(folder, seed=seed), says)
    _raises(lambda: pipeline.write_tfrecords(folder, str(tmp_path / "o"), seed=seed,
                                             progress=False), says)
    np.save(tmp_path / "x.npy", np.zeros((4, 2), np.float32))
    _raises(lambda: pipeline.from_npy_shards(str(tmp_path / "x.npy"), seed=seed), says)
    _raises(lambda: pipeline.from_generator(
        lambda: iter([np.zeros(2, np.float32)]), tf.TensorSpec([2], tf.float32), seed=seed),
        says)
    _raises(lambda: capacity.measure_cost(folder, seed=seed), says)
    _raises(lambda: bench.check_spec({"image_size": [8, 8], "seed": seed}, ["pipeline"]), says)
    _cli_says(["convert", folder, str(tmp_path / "cli"), f"--seed={seed}"], "seed", says)
    _cli_says(["bench", f"--data_dir={folder}", "--compare=", f"--seed={seed}"], "seed", says)
    assert not os.path.exists(tmp_path / "o") and not os.path.exists(tmp_path / "cli")


def test_a_bad_on_error_gets_one_message_everywhere(folder, tmp_path):
    says = f"{ON_ERROR}'ignore'"
    _raises(lambda: config.check_on_error("ignore"), says)
    _raises(lambda: pipeline.from_directory(folder, on_error="ignore"), says)
    _raises(lambda: pipeline.from_paths([folder + "/a/0.png"], on_error="ignore"), says)
    _raises(lambda: pipeline.write_tfrecords(folder, str(tmp_path / "o"), on_error="ignore",
                                             progress=False), says)
    _raises(lambda: capacity.measure_cost(folder, on_error="ignore"), says)
    typed = f"{ON_ERROR}ignore"  # the command line echoes the flag as typed: no quotes
    _cli_says(["convert", folder, str(tmp_path / "cli"), "--on_error=ignore"], "on_error", typed)
    _cli_says(["bench", f"--data_dir={folder}", "--on_error=ignore"], "on_error", typed)
    assert not os.path.exists(tmp_path / "o") and not os.path.exists(tmp_path / "cli")


@pytest.mark.parametrize("size, cli", [((0, 5), "0,5"), ((1, 2, 3), "1,2,3"), (-4, "-4")])
def test_a_bad_image_size_gets_one_message_everywhere(folder, size, cli):
    says = f"{IMAGE_SIZE}{size!r}"
    _raises(lambda: config.check_image_size(size), says)
    _raises(lambda: pipeline.from_directory(folder, image_size=size), says)
    _raises(lambda: capacity.measure_cost(folder, image_size=size), says)
    _raises(lambda: bench.check_spec({"image_size": size}, ["pipeline"]), says)
    _cli_says(["bench", f"--data_dir={folder}", f"--image_size={cli}"], "image_size", says)


def test_seed_range_and_types():
    assert config.check_seed(None) is None
    assert config.check_seed(np.int64(2 ** 63 - 1)) == 2 ** 63 - 1
    assert type(config.check_seed(np.uint32(7))) is int
    for bad in (True, 1.0, "1", np.bool_(False)):
        with pytest.raises(ValueError, match=re.escape(SEED)):
            config.check_seed(bad)


def test_bench_peers_need_a_32_bit_seed():
    spec = {"image_size": 8, "seed": 2 ** 32}
    assert bench.check_spec(spec, ["pipeline", "pipeline_train"])["seed"] == 2 ** 32
    assert bench.check_spec(spec, ["pipeline"])["image_size"] == [8, 8]
    _raises(lambda: bench.check_spec(spec, ["pipeline", "keras"]),
            "`seed` must be an int in [0, 2**32) with peers (keras): they take it as Keras' and "
            "numpy's seeds, which are unsigned 32-bit. Received: seed=4294967296")


def test_cache_is_checked_once_when_the_options_are_made(tmp_path):
    assert config.check_cache(None) is None and config.check_cache("memory") == "memory"
    assert config.check_cache(tmp_path / "c") == str(tmp_path / "c")
    assert config.check_cache("s3://bucket/no/such/c") == "s3://bucket/no/such/c"
    missing = str(tmp_path / "no" / "c")
    says = (f"The folder of the cache file does not exist: {str(tmp_path / 'no')!r}. "
            f"Create it first. Received: cache={missing!r}")
    _raises(lambda: config.check_cache(missing), says)
    _raises(lambda: config.make_options("from_directory", cache=missing), says)
    with pytest.raises(ValueError, match=re.escape("It looks like a misspelt 'memory'. "
                                                   "Received: cache='memroy'")):
        config.check_cache("memroy")
