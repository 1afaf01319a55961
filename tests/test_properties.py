"""The option space, swept by hypothesis (issue #11, deliverable 3), and the issue's faults.

``test_option_space`` draws a combination of source (directory, paths, manifest,
TFRecords with 1-3 shards), shuffle, seed (None included), cache (none, memory, file),
augment (none or a horizontal flip), label_mode, validation_split + subset, input_context
(1-5 input pipelines: all of them are built and their union is checked), on_error with or
without a truncated PNG in the source, resize, image_size (extreme aspect ratios and 1x1
included), batch_size (None, 1, k) and channels, on the tiny images of ``prop_data`` (their
pixels say which file they are and its class). For every combination it checks:

1. every good file exactly once per epoch across all pipelines, for two epochs; the bad
   file recorded by ``pipeline.errors`` under "skip", raised naming it under "raise";
2. each label paired with its file (the class is in the pixels too);
3. ``element_spec`` and every element equal to the documented table;
4. shuffled epochs are not clustered by class (hypergeometric tail bound), differ from
   epoch to epoch, and an unshuffled epoch is in index order;
5. a validation subset is never augmented: its pixels are the same on both passes and
   equal to the un-augmented decode; a training subset's are the decode or its mirror;
6. every file gives the same pixels (within 1 level) whatever the source and options, equal
   to the slow path (``from_paths``, ``fast_jpeg=False``, unshuffled, unbatched, uncached),
   and "pad" places the content fitted and centred;
7. the same seed gives the same elements (a second build of the same options).

The deterministic tests below it are the issue's faults, each a minimal reproduction.
Nothing here is marked xfail: the tests of open faults fail until the faults are fixed.

Hypothesis profiles (registered in ``conftest.py``; ``PIPELINE_HYPOTHESIS_PROFILE`` chooses,
default "ci" when the ``CI`` environment variable is set, else "dev"): "ci" is derandomized
with few examples; "dev" is the same number of random examples; "thorough" runs
``PIPELINE_HYPOTHESIS_EXAMPLES`` (default 2000) and shrinks a failure unless
``PIPELINE_HYPOTHESIS_SHRINK=0``. ``PIPELINE_PROP_LOG=<file>`` appends one line per
example (time, passed/FAILED, seconds, the combination): the count of a long sweep. Set
``PIPELINE_PROP_EXCLUDE_KNOWN=1`` to leave out the combinations that hit the issue's open
faults (see ``known_fault``), so that a sweep looks for new ones.

Only the public API is used: ``import pipeline`` and its documented factories and options.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st
from PIL import Image

import pipeline
from tests import prop_data as pdata
from tests.prop_data import BAD_NAME, CLASSES, N
from conftest import HYPOTHESIS_PROFILE

SHARED = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                      "shared"))

# --- hypothesis profiles: registered and loaded in conftest.py (ci, dev, thorough) -------------

PROFILE = HYPOTHESIS_PROFILE
EXCLUDE_KNOWN = os.environ.get("PIPELINE_PROP_EXCLUDE_KNOWN", "") not in ("", "0")

TOL = 1.5  # levels: ids are 4 luma levels apart; PNG and flat JPEG colours come out exact


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    return pdata.make_corpus(str(tmp_path_factory.mktemp("prop")))


# --- the option space -------------------------------------------------------------------------

@dataclass(frozen=True)
class Config:
    source: str                       # directory | paths | manifest | tfrecords
    shards: int                       # tfrecords: shards written (1-3)
    shuffle: bool
    seed: Optional[int]
    cache: Optional[str]              # None | "memory" | "file"
    augment: bool                     # horizontal flip
    label_mode: Optional[str]         # "int" | "categorical" | None
    split: Optional[float]
    subset: Optional[str]
    pipelines: Optional[int]          # input_context: num_input_pipelines (None: no context)
    bad: bool                         # a truncated PNG in the source
    on_error: str
    resize: str
    image_size: Tuple[int, int]
    batch: Optional[int]              # per replica; the global batch is batch * pipelines
    channels: int

    @property
    def global_batch(self):
        if self.batch is None:
            return None
        return self.batch * (self.pipelines or 1)


IMAGE_SIZES = [(8, 8), (6, 10), (10, 6), (4, 64), (64, 4), (1, 1), (3, 5), (16, 2)]


@st.composite
def configs(draw):
    source = draw(st.sampled_from(["directory", "paths", "manifest", "tfrecords"]))
    split = subset = None
    if source != "tfrecords" and draw(st.booleans()):
        split = draw(st.sampled_from([0.2, 0.3]))
        subset = draw(st.sampled_from(["training", "validation", "both"]))
    cfg = Config(
        source=source,
        shards=draw(st.sampled_from([1, 2, 3])) if source == "tfrecords" else 0,
        shuffle=draw(st.booleans()),
        seed=draw(st.one_of(st.none(), st.integers(0, 2 ** 31 - 1))),
        cache=draw(st.sampled_from([None, "memory", "file"])),
        augment=draw(st.booleans()),
        label_mode=draw(st.sampled_from(["int", "categorical", None])),
        split=split,
        subset=subset,
        pipelines=draw(st.sampled_from([None, 1, 2, 3, 4, 5])),
        bad=draw(st.booleans()),
        on_error=draw(st.sampled_from(["raise", "skip"])),
        resize=draw(st.sampled_from(["stretch", "crop", "pad", "center_crop"])),
        image_size=draw(st.sampled_from(IMAGE_SIZES)),
        batch=draw(st.sampled_from([None, 1, 2, 5, 7])),
        channels=draw(st.sampled_from([1, 3, 4])),
    )
    return cfg


def _pad_dims(w, h, th, tw):
    """Content size (rows, cols) of ``resize="pad"``, as tf.image.resize_with_pad."""
    ratio = max(w / tw, h / th)
    return math.floor(h / ratio), math.floor(w / ratio)


def source_files(corpus, cfg) -> List[pdata.FileInfo]:
    ids = corpus.manifest_ids if cfg.source == "manifest" else range(N)
    return [corpus.files[i] for i in ids]


def known_fault(corpus, cfg) -> Optional[str]:
    """Which open fault or documented limitation this combination meets (None: none).

    Every fault this sweep was written against is fixed (faults 1-6 of issue #11, the
    cache after a failed epoch, 1-tuples with cache + augment + no labels); add an entry
    here while a newly found one is open, so that ``PIPELINE_PROP_EXCLUDE_KNOWN=1``
    sweeps past it.
    """
    del corpus, cfg
    return None


# --- building --------------------------------------------------------------------------------

def factory_kwargs(cfg, cache_dir, pipeline_id=0):
    kw = dict(image_size=cfg.image_size, resize=cfg.resize, channels=cfg.channels,
              shuffle=cfg.shuffle, seed=cfg.seed, label_mode=cfg.label_mode,
              on_error=cfg.on_error, batch_size=cfg.global_batch)
    if cfg.cache == "memory":
        kw["cache"] = "memory"
    elif cfg.cache == "file":
        kw["cache"] = os.path.join(cache_dir, "cache")
    if cfg.augment:
        kw["augment"] = pipeline.Augment(horizontal_flip=True)
    if cfg.split is not None:
        kw.update(validation_split=cfg.split, subset=cfg.subset)
    if cfg.pipelines is not None:
        kw["input_context"] = tf.distribute.InputContext(
            num_input_pipelines=cfg.pipelines, input_pipeline_id=pipeline_id,
            num_replicas_in_sync=cfg.pipelines)
    return kw


def build(corpus, cfg, cache_dir, pipeline_id=0) -> Dict[str, tf.data.Dataset]:
    """{subset name: dataset} for one input pipeline."""
    kw = factory_kwargs(cfg, cache_dir, pipeline_id)
    tree = "bad" if cfg.bad else "clean"
    if cfg.source == "directory":
        out = pipeline.from_directory(corpus.bad if cfg.bad else corpus.clean, **kw)
    elif cfg.source == "paths":
        paths = corpus.paths(tree)
        labels = ["b" if corpus.id_of_path(p) is None else CLASSES[pdata.label_of(
            corpus.id_of_path(p))] for p in paths]
        out = pipeline.from_paths(paths, labels=labels, class_names=list(CLASSES), **kw)
    elif cfg.source == "manifest":
        out = pipeline.from_manifest(corpus.manifest_bad if cfg.bad else corpus.manifest_clean,
                                     class_names=list(CLASSES), **kw)
    else:
        out = pipeline.from_tfrecords(corpus.shards[(tree, cfg.shards)], **kw)
    if cfg.subset == "both":
        assert isinstance(out, tuple) and len(out) == 2, type(out)
        return {"training": out[0], "validation": out[1]}
    return {cfg.subset or "all": out}


_REFERENCE: Dict[tuple, Dict[int, np.ndarray]] = {}


def reference(corpus, channels, image_size, resize) -> Dict[int, np.ndarray]:
    """{id: image} by the slow path: from_paths, unshuffled, unbatched, no cache, no fast JPEG."""
    key = (channels, image_size, resize)
    if key not in _REFERENCE:
        table = pdata.expected_table(channels)
        ds = pipeline.from_paths(corpus.paths("clean"), image_size=image_size, resize=resize,
                                 channels=channels, batch_size=None, shuffle=False,
                                 fast_jpeg=False, on_error="skip")
        out = {}
        for x in ds:
            x = x.numpy()
            i, problem = pdata.decode_id(x, channels, table, TOL)
            if i is not None:
                out[i] = x
        _REFERENCE[key] = out
    return _REFERENCE[key]


# --- reading an epoch ----------------------------------------------------------------------

@dataclass
class Epoch:
    elements: list            # (id, label array or None, image array)
    batch_sizes: list
    error: Optional[str]
    problems: list


def expected_spec(cfg, num_classes=3):
    h, w = cfg.image_size
    batched = cfg.batch is not None
    img = tf.TensorSpec([None, h, w, cfg.channels] if batched else [h, w, cfg.channels],
                        tf.uint8)
    if cfg.label_mode is None:
        return img
    if cfg.label_mode == "int":
        lab = tf.TensorSpec([None] if batched else [], tf.int32)
    else:
        lab = tf.TensorSpec([None, num_classes] if batched else [num_classes], tf.float32)
    return (img, lab)


def read_epoch(ds, cfg) -> Epoch:
    table = pdata.expected_table(cfg.channels)
    h, w = cfg.image_size
    elements, sizes, problems = [], [], []
    error = None
    try:
        for el in ds:
            if cfg.label_mode is None:
                if isinstance(el, tuple):
                    problems.append(f"label_mode=None gave a tuple of {len(el)}")
                    el = el[0]
                images, labels = el, None
            else:
                if not (isinstance(el, tuple) and len(el) == 2):
                    problems.append(f"element is {type(el).__name__}, not (images, labels)")
                    continue
                images, labels = el
            if images.dtype != tf.uint8:
                problems.append(f"images dtype {images.dtype.name}")
            x = images.numpy()
            y = None if labels is None else labels.numpy()
            if cfg.batch is None:
                x = x[None]
                y = None if y is None else y[None]
            else:
                sizes.append(x.shape[0])
            if x.shape[1:] != (h, w, cfg.channels):
                problems.append(f"image shape {x.shape[1:]}, expected {(h, w, cfg.channels)}")
                continue
            if y is not None:
                want = np.int32 if cfg.label_mode == "int" else np.float32
                if y.dtype != want or y.shape[0] != x.shape[0] or (
                        cfg.label_mode == "categorical" and y.shape[1:] != (3,)) or (
                        cfg.label_mode == "int" and y.shape[1:] != ()):
                    problems.append(f"labels {y.dtype} {y.shape} for images {x.shape}")
                    continue
            for r in range(x.shape[0]):
                i, problem = pdata.decode_id(x[r], cfg.channels, table, TOL)
                if problem:
                    problems.append(problem)
                    continue
                elements.append((i, None if y is None else y[r], x[r]))
    except tf.errors.OpError as e:
        error = f"{type(e).__name__}: {e.message}"
    return Epoch(elements, sizes, error, problems)


# --- the checks ------------------------------------------------------------------------------

def check_label(cfg, i, y):
    lab = pdata.label_of(i)
    if cfg.label_mode == "int":
        assert int(y) == lab, f"file {i} (class {lab}) has label {y}"
    elif cfg.label_mode == "categorical":
        want = np.eye(3, dtype=np.float32)[lab]
        assert np.array_equal(y, want), f"file {i} (class {lab}) has label {y}"


def check_geometry(cfg, corpus, i, img):
    """Flat files: stretch/crop/center_crop fill the frame; pad fits the content, centred."""
    f = corpus.files[i]
    mask = pdata.content_mask(img)
    table = pdata.expected_table(cfg.channels)
    if not f.marked:
        problem = pdata.flat_problem(img, i, table, TOL)
        assert problem is None, problem
    else:  # mark pixels blend towards black: never brighter than the colour
        px = img[mask].astype(np.float64)
        assert (px <= table[i][None, :] + TOL).all(), f"id {i}: a pixel brighter than its colour"
    if f.marked:
        return
    th, tw = cfg.image_size
    if cfg.resize in ("stretch", "crop", "center_crop"):
        assert mask.all(), f"id {i}: {cfg.resize} left {int((~mask).sum())} black pixels"
        return
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    rh, rw = _pad_dims(*f.size, th, tw)
    rh, rw = max(rh, 1), max(rw, 1)
    got_h, got_w = rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1
    assert abs(got_h - rh) <= 1 and abs(got_w - rw) <= 1, (
        f"id {i} ({f.size[0]}x{f.size[1]}) padded to {th}x{tw}: content {got_h}x{got_w}, "
        f"expected {rh}x{rw}")
    assert mask[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1].all(), f"id {i}: holes in content"
    top, bottom = rows[0], th - 1 - rows[-1]
    left, right = cols[0], tw - 1 - cols[-1]
    # centred: the content's centre within 1 px of the frame's (tf.image.resize_with_pad
    # floors the float margin, so a 2.4 px content in 64 px sits at 30 | 2 | 32)
    assert abs(top - bottom) <= 2 and abs(left - right) <= 2, (
        f"id {i}: content not centred (margins top {top} bottom {bottom} left {left} "
        f"right {right})")


def close(a, b, tol=1):
    return a.shape == b.shape and int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max(
        initial=0)) <= tol


def balance_problem(labels, class_counts, alpha=1e-6):
    """None, or why the class counts among ``labels`` (the first draws of a shuffle, i.e.
    draws without replacement from a population with ``class_counts``) are implausible:
    a count outside the exact hypergeometric two-sided tail of probability alpha / classes."""
    pop = sum(class_counts.values())
    got = Counter(int(v) for v in labels)
    for c, k in class_counts.items():
        lo, hi = pdata.hypergeom_bounds(pop, k, len(labels), alpha / len(class_counts))
        if not lo <= got[c] <= hi:
            return (f"class counts {[got[c] for c in sorted(class_counts)]} in the first "
                    f"{len(labels)} of {pop}; a fair shuffle gives {lo}..{hi} for class {c} "
                    f"with probability >= 1 - {alpha:g}")
    return None


@given(cfg=configs())
@settings(settings.get_profile(PROFILE))
def test_option_space(corpus, cfg):
    fault = known_fault(corpus, cfg)
    note(f"known fault met: {fault}")
    if EXCLUDE_KNOWN:
        assume(fault is None)
    cache_dir = tempfile.mkdtemp(dir=corpus.base, prefix="cache-")
    start, outcome = time.monotonic(), "FAILED"
    try:
        _check_config(corpus, cfg, cache_dir)
        outcome = "passed"
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
        _log_example(cfg, outcome, time.monotonic() - start)


@st.composite
def repeated_rows(draw):
    """Files listed 1-4 times each in a shuffled manifest, with a split and options."""
    ids = draw(st.lists(st.integers(0, N - 1), min_size=2, max_size=8, unique=True))
    reps = draw(st.lists(st.integers(1, 4), min_size=len(ids), max_size=len(ids)))
    return dict(repeats=dict(zip(ids, reps)), order_seed=draw(st.integers(0, 1000)),
                split=draw(st.sampled_from([0.2, 0.3, 0.5, 0.7])),
                seed=draw(st.one_of(st.none(), st.integers(0, 2 ** 31 - 1))),
                shuffle=draw(st.booleans()), batch=draw(st.sampled_from([None, 1, 3])),
                cache=draw(st.sampled_from([None, "memory", "file"])),
                pipelines=draw(st.sampled_from([None, 2])))


@given(case=repeated_rows())
@settings(settings.get_profile(PROFILE))
def test_validation_split_with_repeated_manifest_rows(corpus, case):
    """``validation_split`` splits by file: every row of a file is delivered on that
    file's side (as many times as it is listed), no file is on both sides, and the
    validation side holds int(files * split) files; two epochs, every input pipeline."""
    files = sorted(case["repeats"])
    n_val = int(len(files) * case["split"])
    assume(0 < n_val < len(files))
    cache_dir = tempfile.mkdtemp(dir=corpus.base, prefix="split-")
    try:
        man = cache_dir + ".csv"  # in corpus.base, beside the trees it names
        pdata.write_repeated_manifest(corpus, case["repeats"], man, case["order_seed"])
        k = case["pipelines"] or 1
        sides = {"training": [Counter(), Counter()], "validation": [Counter(), Counter()]}
        for pid in range(k):
            kw = dict(image_size=(8, 8), batch_size=None if case["batch"] is None
                      else case["batch"] * k, shuffle=case["shuffle"], seed=case["seed"],
                      validation_split=case["split"], subset="both", label_mode="int",
                      class_names=list(CLASSES))
            if case["cache"] == "memory":
                kw["cache"] = "memory"
            elif case["cache"] == "file":
                kw["cache"] = os.path.join(cache_dir, "c")
            if case["pipelines"]:
                kw["input_context"] = tf.distribute.InputContext(
                    num_input_pipelines=k, input_pipeline_id=pid, num_replicas_in_sync=k)
            train, val = pipeline.from_manifest(man, **kw)
            table = pdata.expected_table(3)
            for name, ds in (("training", train), ("validation", val)):
                for epoch in range(2):
                    for x, y in ds:
                        x, y = x.numpy(), y.numpy()
                        if case["batch"] is None:
                            x, y = x[None], y[None]
                        for r in range(x.shape[0]):
                            i, problem = pdata.decode_id(x[r], 3, table, TOL)
                            assert problem is None, problem
                            assert int(y[r]) == pdata.label_of(i), (i, y[r])
                            sides[name][epoch][i] += 1
        for epoch in range(2):
            tr, va = sides["training"][epoch], sides["validation"][epoch]
            assert not set(tr) & set(va), f"files on both sides: {sorted(set(tr) & set(va))}"
            assert set(tr) | set(va) == set(files), (sorted(tr), sorted(va), files)
            assert len(va) == n_val, (len(va), n_val)
            for i, n in list(tr.items()) + list(va.items()):
                assert n == case["repeats"][i], f"file {i}: {n} rows, listed {case['repeats'][i]}"
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
        if os.path.exists(cache_dir + ".csv"):
            os.remove(cache_dir + ".csv")


def _log_example(cfg, outcome, seconds):
    """One line per example to the file PIPELINE_PROP_LOG names (if set): a sweep's count."""
    path = os.environ.get("PIPELINE_PROP_LOG")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {outcome} {seconds:.1f}s {cfg}\n")


def _check_config(corpus, cfg, cache_dir):
    k = cfg.pipelines or 1
    builds = [build(corpus, cfg, cache_dir, p) for p in range(k)]
    names = list(builds[0])
    files = source_files(corpus, cfg)
    all_ids = [f.id for f in files]
    src_paths = None if cfg.source == "tfrecords" else (
        [f.path for f in files] + ([corpus.bad_path] if cfg.bad else []))

    # 3: structure, and the documented attributes
    spec = expected_spec(cfg)
    for b in builds:
        for name, ds in b.items():
            assert ds.element_spec == spec, (name, ds.element_spec, spec)
            if cfg.label_mode is not None:
                assert list(ds.class_names) == list(CLASSES), ds.class_names

    # which files each subset holds
    expected: Dict[str, List[int]] = {}
    full: Dict[str, List[str]] = {}  # every input pipeline's file_paths, interleaved
    holds_bad: Dict[str, bool] = {}
    for name in names:
        # Each input pipeline lists its own share (the files it yields, as Keras'
        # file_paths): disjoint, and together every file, in index order.
        shares = [b[name].file_paths for b in builds]
        fps = shares[0]
        if cfg.source != "tfrecords" and len(builds) > 1:
            k = len(builds)
            fps = [None] * sum(len(sh) for sh in shares)
            for i, sh in enumerate(shares):
                fps[i::k] = sh
        if cfg.source == "tfrecords":
            assert fps is None or sorted(map(os.path.basename, fps)) == sorted(
                map(os.path.basename, corpus.paths("bad" if cfg.bad else "clean")))
            expected[name], holds_bad[name] = all_ids, cfg.bad
            continue
        ids = [corpus.id_of_path(p) for p in fps]
        expected[name] = [i for i in ids if i is not None]
        holds_bad[name] = None in ids
        full[name] = fps
        if cfg.split is None:
            assert sorted(map(os.path.basename, fps)) == sorted(map(os.path.basename,
                                                                    src_paths))
    if cfg.split is not None:
        n = len(src_paths)
        n_val = int(n * cfg.split)  # Keras' rule: int(), not round()
        if cfg.subset == "both":
            tr, va = full["training"], full["validation"]
            assert not set(tr) & set(va), "training and validation share files"
            assert sorted(map(os.path.basename, tr + va)) == sorted(
                map(os.path.basename, src_paths))
            assert len(va) == n_val, (len(va), n_val)
        elif cfg.subset == "validation":
            assert len(full["validation"]) == n_val
        else:
            assert len(full["training"]) == n - n_val

    epochs = {name: [[read_epoch(b[name], cfg) for b in builds] for _ in range(2)]
              for name in names}
    for name in names:
        for e, per_pipeline in enumerate(epochs[name]):
            for p, ep in enumerate(per_pipeline):
                assert not ep.problems, (name, e, p, ep.problems[:5])

    ref = reference(corpus, cfg.channels, cfg.image_size, cfg.resize)
    for name in names:
        want = Counter(expected[name])
        raising = cfg.bad and cfg.on_error == "raise" and holds_bad[name]
        for e, per_pipeline in enumerate(epochs[name]):
            got = Counter(i for ep in per_pipeline for i, _, _ in ep.elements)
            where = f"{name} subset, epoch {e + 1}, {k} pipeline(s)"
            errors = [ep.error for ep in per_pipeline if ep.error]
            # 1: exactly once, and the bad file's fate
            if raising:
                assert len(errors) == 1, f"{where}: {len(errors)} pipelines raised: {errors}"
                assert BAD_NAME in errors[0], f"{where}: the error does not name the file: " \
                                              f"{errors[0][:400]}"
                dup = [i for i, c in got.items() if c > 1]
                assert not dup and set(got) <= set(want), f"{where}: duplicates {dup}"
            else:
                assert not errors, f"{where}: {errors[0][:600]}"
                missing = sorted((want - got).elements())
                extra = sorted((got - want).elements())
                assert not missing and not extra, (
                    f"{where}: missing {missing}, duplicated/extra {extra}")
            if cfg.on_error == "skip":
                recorded = {os.path.basename(r.path) for b in builds
                            for r in pipeline.errors(b[name])}
                assert recorded == ({BAD_NAME} if cfg.bad and holds_bad[name] else set()), (
                    f"{where}: pipeline.errors lists {recorded}")
            # batches: full except the last (and, under skip, one a bad file shrank)
            for ep in per_pipeline:
                sizes = ep.batch_sizes
                assert all(1 <= s <= cfg.batch for s in sizes), (where, sizes)
                short = sum(s < cfg.batch for s in sizes[:-1]) if sizes else 0
                allowed = 1 if (cfg.bad and cfg.on_error == "skip") else 0
                assert short <= allowed, f"{where}: short batches in the middle: {sizes}"
            # 2, 6: labels, pixels, geometry
            for ep in per_pipeline:
                for i, y, img in ep.elements:
                    check_label(cfg, i, y)
                    check_geometry(cfg, corpus, i, img)
                    if i not in ref:
                        continue  # the slow path lost it too; exactly-once said so
                    if not cfg.augment:
                        assert close(img, ref[i]), (
                            f"{where}: file {i} differs from the slow path "
                            f"(from_paths, fast_jpeg=False) by "
                            f"{np.abs(img.astype(int) - ref[i].astype(int)).max()} levels")
                    elif name == "validation":  # 5
                        assert close(img, ref[i]), (
                            f"{where}: validation file {i} is not the un-augmented decode "
                            "(the validation subset was augmented)")
                    else:
                        assert close(img, ref[i]) or close(img, ref[i][:, ::-1]), (
                            f"{where}: file {i} is neither its decode nor its mirror")
            # 4: order
            if not raising:
                for p, ep in enumerate(per_pipeline):
                    seq = [i for i, _, _ in ep.elements]
                    if not cfg.shuffle:
                        pos = {i: n for n, i in enumerate(expected[name])}
                        assert [pos[i] for i in seq] == sorted(pos[i] for i in seq), (
                            f"{where}, pipeline {p}: shuffle=False out of index order: {seq}")
        if not raising:
            for p in range(k):
                e1 = [i for i, _, _ in epochs[name][0][p].elements]
                e2 = [i for i, _, _ in epochs[name][1][p].elements]
                if cfg.shuffle and len(e1) >= 10:
                    assert e1 != e2, f"{name}, pipeline {p}: both epochs in the same order"
            if cfg.shuffle and k == 1 and cfg.split is None and len(want) >= 60:
                seq = [i for i, _, _ in epochs[name][0][0].elements]
                counts = Counter(pdata.label_of(i) for i in want.elements())
                problem = balance_problem([pdata.label_of(i) for i in seq[: len(seq) // 2]],
                                          counts)
                assert problem is None, f"{name}, first half of epoch 1: {problem}"
        # 5: the validation subset is the same on both passes
        if name == "validation" and not raising:
            for p in range(k):
                a = {i: img for i, _, img in epochs[name][0][p].elements}
                b = {i: img for i, _, img in epochs[name][1][p].elements}
                changed = [i for i in a if i in b and not np.array_equal(a[i], b[i])]
                assert not changed, f"validation files {changed} differ between two passes"

    # 7: the same seed gives the same elements (a fresh build of pipeline 0)
    if cfg.seed is not None and not (cfg.bad and cfg.on_error == "raise"):
        again = build(corpus, cfg, cache_dir, 0)
        for name in names:
            first = epochs[name][0][0].elements
            second = read_epoch(again[name], cfg)
            assert second.error is None and not second.problems
            assert [i for i, _, _ in first] == [i for i, _, _ in second.elements], (
                f"{name}: seed={cfg.seed} gave another order on a second build")
            same_px = all(np.array_equal(a[2], b[2]) for a, b in zip(first, second.elements))
            assert same_px, f"{name}: seed={cfg.seed} gave other pixels on a second build"


# --- deterministic tests: the faults ------------------------------------------------

def _solid_png_bytes(rgb, size=(4, 4)):
    buf = io.BytesIO()
    Image.new("RGB", size, rgb).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def three_classes(tmp_path_factory):
    """3 classes x 600 tiny PNGs, files sorted by class (the issue's fault 1 folder)."""
    root = tmp_path_factory.mktemp("clusters")
    for c, rgb in zip(CLASSES, [(200, 30, 30), (30, 200, 30), (30, 30, 200)]):
        data = _solid_png_bytes(rgb)
        os.makedirs(root / c)
        for j in range(600):
            (root / c / f"{j:04d}.png").write_bytes(data)
    return str(root)


@pytest.mark.parametrize("cache", [None, "memory", "file"])
def test_shuffle_does_not_cluster_classes(three_classes, tmp_path, cache):
    """Fault 1: with a cache, the first 10 batches held 167 / 141 / 12 of the 3 classes."""
    if cache == "file":
        cache = str(tmp_path / "cache")
    ds = pipeline.from_directory(three_classes, image_size=(4, 4), batch_size=32, shuffle=True,
                                 seed=0, cache=cache)
    labels = np.concatenate([y.numpy() for _, y in ds.take(10)])
    assert len(labels) == 320
    problem = balance_problem(labels, {c: 600 for c in range(3)})
    assert problem is None, f"cache={cache!r}: {problem}"


def test_tfrecords_shuffle_does_not_cluster_classes(three_classes, tmp_path):
    """The same bound for TFRecord shards (records are written round-robin, so every
    shard is in class order; shuffling shard order does not mix classes)."""
    out = str(tmp_path / "shards")
    pipeline.write_tfrecords(three_classes, out, num_shards=4, progress=False)
    ds = pipeline.from_tfrecords(out, image_size=(4, 4), batch_size=32, shuffle=True, seed=0)
    labels = np.concatenate([y.numpy() for _, y in ds.take(10)])
    problem = balance_problem(labels, {c: 600 for c in range(3)})
    assert problem is None, f"from_tfrecords: {problem}"


def test_seed_none_fewer_shards_than_pipelines_exactly_once(tmp_path):
    """Fault 2: 12 images in 3 shards read by 4 pipelines with seed=None."""
    root = tmp_path / "imgs"
    for i in range(12):
        os.makedirs(root / CLASSES[i % 3], exist_ok=True)
        Image.new("RGB", (6, 6), (10 * i + 5,) * 3).save(root / CLASSES[i % 3] / f"{i:02d}.png")
    out = str(tmp_path / "shards")
    pipeline.write_tfrecords(str(root), out, num_shards=3, progress=False)
    want = [10 * i + 5 for i in range(12)]
    for trial in range(2):
        dss = [pipeline.from_tfrecords(
            out, image_size=(6, 6), batch_size=4, shuffle=True, seed=None,
            input_context=tf.distribute.InputContext(4, i, 4)) for i in range(4)]
        for epoch in range(2):
            got = sorted(int(v) for ds in dss for x, _ in ds for v in x[:, 0, 0, 0].numpy())
            assert got == want, (f"trial {trial}, epoch {epoch + 1}: missing "
                                 f"{sorted(Counter(want) - Counter(got))}, duplicated "
                                 f"{sorted(Counter(got) - Counter(want))}")


@pytest.mark.parametrize("subset", ["both", "validation"])
def test_validation_subset_is_not_augmented(corpus, subset):
    """Fault 3: validation pixels are the same on two passes and equal to the
    un-augmented decode; the training subset is flipped (the marked files show it)."""
    kw = dict(image_size=(8, 8), batch_size=None, shuffle=False, seed=3, validation_split=0.3,
              subset=subset)
    plain = pipeline.from_directory(corpus.clean, **kw)
    aug = pipeline.from_directory(corpus.clean, augment=pipeline.Augment(horizontal_flip=True),
                                  **kw)
    if subset == "both":
        plain_val, aug_val = plain[1], aug[1]
    else:
        plain_val, aug_val = plain, aug
    want = [x.numpy() for x, _ in plain_val]
    marked = {f.id for f in corpus.files if f.marked}
    table = pdata.expected_table(3)
    val_ids = [pdata.decode_id(x, 3, table, TOL)[0] for x in want]
    assert marked & set(val_ids), "no marked file in the validation subset: a flip is invisible"
    for p in range(2):
        got = [x.numpy() for x, _ in aug_val]
        diff = [val_ids[j] for j, (a, b) in enumerate(zip(got, want)) if not np.array_equal(a, b)]
        assert len(got) == len(want) and not diff, (
            f"pass {p + 1}: validation files {diff} were augmented")
    if subset == "both":
        flipped = 0
        for _ in range(2):
            for x, _ in aug[0]:
                x = x.numpy()
                i, _ = pdata.decode_id(x, 3, table, TOL)
                if i in marked and x[:, -1].max() <= 4:  # the black mark moved to the right
                    flipped += 1
        assert flipped, "the training subset was never flipped: the check above proves nothing"


@pytest.fixture(scope="module")
def big_exif_jpegs(tmp_path_factory):
    """Large textured JPEGs (1000x800, 800x1000) with an EXIF block, orientation 1."""
    base = tmp_path_factory.mktemp("exif")
    root = base / "photos"
    os.makedirs(root / "x")
    rng = np.random.RandomState(4)
    for j, (w, h) in enumerate([(1000, 800), (800, 1000)]):
        yy, xx = np.mgrid[0:h, 0:w]
        low = np.asarray(Image.fromarray(rng.randint(0, 255, (h // 50, w // 50, 3)).astype(
            np.uint8)).resize((w, h), Image.BILINEAR)).astype(np.float64)
        stripes = 60 * np.sin(xx / 3.1 + yy / 7.3)[..., None]
        arr = np.clip(low + stripes, 0, 255).astype(np.uint8)
        ex = Image.Exif()
        ex[0x0112] = 1
        Image.fromarray(arr).save(root / "x" / f"photo{j}.jpg", "JPEG", quality=90,
                                  exif=ex.tobytes())
    man = base / "photos.csv"
    man.write_text("path,label\n" + "".join(f"photos/x/photo{j}.jpg,x\n" for j in range(2)))
    shards = str(base / "shards")
    pipeline.write_tfrecords(str(root), shards, num_shards=1, shuffle=False, progress=False)
    return str(root), str(man), shards


def test_same_pixels_from_every_source_large_exif_jpeg(big_exif_jpegs):
    """Fault 4: a large JPEG with an EXIF block (no rotation) at 224x224 decodes to the same
    pixels from a folder, a path list, a manifest and TFRecord shards (within 1 level)."""
    root, man, shards = big_exif_jpegs
    kw = dict(image_size=(224, 224), batch_size=None, shuffle=False)
    paths = sorted(os.path.join(root, "x", f) for f in os.listdir(os.path.join(root, "x")))
    sources = {
        "from_directory": pipeline.from_directory(root, **kw),
        "from_paths": pipeline.from_paths(paths, labels=["x", "x"], **kw),
        "from_manifest": pipeline.from_manifest(man, **kw),
        "from_tfrecords": pipeline.from_tfrecords(shards, **kw),
    }
    images = {name: [x.numpy().astype(int) for x, _ in ds] for name, ds in sources.items()}
    base = images["from_directory"]
    assert len(base) == 2
    for name, got in images.items():
        assert len(got) == 2, name
        for j in range(2):
            d = int(np.abs(got[j] - base[j]).max())
            assert d <= 1, f"{paths[j]}: {name} differs from from_directory by {d} levels"


@pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED, "cases2")),
                    reason="needs ../shared/cases2")
@pytest.mark.parametrize("name,axis", [("wide_10000x3.png", 0), ("tall_3x10000.png", 1)])
def test_pad_keeps_thin_images(name, axis):
    """Fault 5: resize="pad" of a valid 10000x3 (3x10000) PNG to 224x224 gives the content
    fitted (all 224 columns / rows), at least 1 px thick and centred; not a "corrupt PNG"."""
    path = os.path.join(SHARED, "cases2", name)
    colour = np.asarray(Image.open(path).convert("RGB"))[0, 0].astype(int)
    ds = pipeline.from_paths([path], image_size=(224, 224), resize="pad", batch_size=None,
                             shuffle=False)
    try:
        (x,) = [t.numpy() for t in ds]
    except tf.errors.OpError as e:
        pytest.fail(f"pad of a valid thin image failed: {e.message[:300]}")
    content = np.abs(x.astype(int) - colour).max(axis=-1) <= 1
    black = (x == 0).all(axis=-1)
    assert (content | black).all(), "pixels that are neither the content nor the letterbox"
    lines = np.flatnonzero(content.any(axis=1 - axis))  # the rows (wide) / columns (tall)
    assert len(lines) >= 1, "the content was scaled to 0 px"
    assert len(lines) <= 2, f"content {len(lines)} px thick, expected 1 (224 * 3 / 10000)"
    assert (content[lines[0]] if axis == 0 else content[:, lines[0]]).all(), \
        "the content does not span the whole width/height"
    before, after = lines[0], 223 - lines[-1]
    assert abs(before - after) <= 2, f"not centred: {before} px before, {after} px after"


def test_include_paths_matches_rows_to_files_under_skip(corpus):
    """Fault 6: ``include_paths=True`` puts each element's file path in the element, so
    outputs (as from ``model.predict``) can be matched to files when bad files are skipped."""
    table = pdata.expected_table(3)
    ds = pipeline.from_directory(corpus.bad, image_size=(8, 8), batch_size=7, shuffle=True,
                                 seed=0, on_error="skip", include_paths=True)
    spec = ds.element_spec
    assert len(spec) == 3, spec
    assert spec[2] == tf.TensorSpec([None], tf.string), spec[2]
    seen = []
    for x, y, paths in ds:
        assert x.shape[0] == y.shape[0] == paths.shape[0]
        # "predict": one output row per image; the paths say which file each row is
        outputs = [pdata.decode_id(img, 3, table, TOL)[0] for img in x.numpy()]
        for out, p, label in zip(outputs, paths.numpy(), y.numpy()):
            p = p.decode()
            assert out == corpus.id_of_path(p), f"row of file {out} carries the path {p}"
            assert label == pdata.label_of(out)
            seen.append(os.path.basename(p))
    assert sorted(seen) == sorted(os.path.basename(p) for p in corpus.paths("clean"))
    assert [os.path.basename(r.path) for r in pipeline.errors(ds)] == [BAD_NAME]

    unlabelled = pipeline.from_directory(corpus.clean, labels=None, image_size=(8, 8),
                                         batch_size=None, shuffle=False, include_paths=True)
    assert unlabelled.element_spec == (tf.TensorSpec([8, 8, 3], tf.uint8),
                                       tf.TensorSpec([], tf.string))
    for x, p in unlabelled.take(5):
        assert pdata.decode_id(x.numpy(), 3, table, TOL)[0] == corpus.id_of_path(
            p.numpy().decode())

    records = pipeline.from_tfrecords(corpus.shards[("bad", 2)], image_size=(8, 8),
                                      batch_size=5, shuffle=True, seed=1, on_error="skip",
                                      include_paths=True)
    got = []
    for x, _, paths in records:
        for img, p in zip(x.numpy(), paths.numpy()):
            assert pdata.decode_id(img, 3, table, TOL)[0] == corpus.id_of_path(p.decode())
            got.append(os.path.basename(p.decode()))
    assert sorted(got) == sorted(os.path.basename(p) for p in corpus.paths("clean"))


# --- found by test_option_space ---------------------------------------------------------------

@pytest.mark.parametrize("cache,no_labels", [("memory", {"label_mode": None}),
                                              ("file", {"labels": None})])
def test_unlabelled_elements_with_cache_and_augment_are_images(corpus, tmp_path, cache,
                                                               no_labels):
    """Without labels, elements are ``images`` alone (API.md), also with a cache and
    augmentation; they came out as 1-tuples ``(images,)``."""
    ds = pipeline.from_directory(
        corpus.clean, image_size=(8, 8), batch_size=7, seed=0,
        cache="memory" if cache == "memory" else str(tmp_path / "cache"),
        augment=pipeline.Augment(horizontal_flip=True), **no_labels)
    assert ds.element_spec == tf.TensorSpec([None, 8, 8, 3], tf.uint8), ds.element_spec
    assert isinstance(next(iter(ds)), tf.Tensor)


# --- resume at a random step of a random epoch -------------------------------------------------

RESUME_EXAMPLES = 3
RESUME_EPOCHS = 3


@st.composite
def resume_cases(draw):
    cfg = Config(
        source=draw(st.sampled_from(["directory", "manifest", "tfrecords"])), shards=2,
        shuffle=draw(st.booleans()), seed=draw(st.integers(0, 2 ** 31 - 1)),
        cache=draw(st.sampled_from([None, None, "memory"])), augment=True,
        label_mode="int", split=None, subset=None, pipelines=None, bad=draw(st.booleans()),
        on_error="skip", resize="stretch", image_size=(6, 6),
        batch=draw(st.sampled_from([None, 2, 5])), channels=3)
    return cfg, draw(st.integers(0, RESUME_EPOCHS - 1)), draw(st.floats(0, 1))


@given(case=resume_cases())
@settings(settings.get_profile(PROFILE), max_examples=RESUME_EXAMPLES)
def test_resume_at_random_step_matches_unbroken_run(corpus, tmp_path_factory, case):
    """An iterator checkpoint taken at a random step of a random epoch and restored
    into a fresh dataset (a new dataset object: what a new process builds) continues
    with the unbroken run's elements, order and pixels, in every later epoch."""
    cfg, epoch, frac = case
    cache_dir = str(tmp_path_factory.mktemp("resume"))
    kw = factory_kwargs(cfg, cache_dir)
    # random ops: a crop window and brightness per element and epoch
    kw["augment"] = pipeline.Augment(random_resized_crop=True, horizontal_flip=True,
                                     brightness=0.3)

    def key(el):
        return tuple(np.asarray(t).tobytes() for t in tf.nest.flatten(el))

    def run(ds):
        return ds.repeat(RESUME_EPOCHS)

    def make_aug():  # as ``build``, with the random augment
        tree = "bad" if cfg.bad else "clean"
        if cfg.source == "directory":
            return pipeline.from_directory(corpus.bad if cfg.bad else corpus.clean, **kw)
        if cfg.source == "manifest":
            return pipeline.from_manifest(corpus.manifest_bad if cfg.bad else
                                          corpus.manifest_clean, class_names=list(CLASSES), **kw)
        return pipeline.from_tfrecords(corpus.shards[(tree, cfg.shards)], **kw)

    unbroken = [key(el) for el in run(make_aug())]
    per_epoch = len(unbroken) // RESUME_EPOCHS
    assert per_epoch * RESUME_EPOCHS == len(unbroken) and per_epoch > 0
    stop = epoch * per_epoch + min(per_epoch - 1, int(frac * per_epoch))
    it = iter(run(make_aug()))
    before = [key(next(it)) for _ in range(stop)]
    path = tf.train.Checkpoint(iterator=it).save(os.path.join(cache_dir, "ck", "it"))
    restored = iter(run(make_aug()))
    tf.train.Checkpoint(iterator=restored).restore(path)
    after = [key(el) for el in restored]
    note(f"stop={stop} per_epoch={per_epoch}")
    assert before == unbroken[:stop]
    assert after == unbroken[stop:]


# --- segmentation pairs over the option space --------------------------------------------------

@pytest.fixture(scope="session")
def pair_corpus(tmp_path_factory):
    return pdata.make_pair_corpus(str(tmp_path_factory.mktemp("pairs")))


_PAIR_AUGMENTS = {
    "none": None,
    "flip": dict(horizontal_flip=True, vertical_flip=True),
    "geometry": dict(rotation=25, zoom=0.2, width_shift=0.1, shear=8, fill_mode="constant"),
    # The random resized crop can enlarge a small window several times: bilinear
    # blending then spans more than the one pixel the class check forgives at a
    # boundary, so this crop (and, under it, the factory's resize before a cache)
    # samples nearest: image and mask must then agree at every pixel.
    "crop": dict(random_resized_crop=True, horizontal_flip=True, interpolation="nearest"),
    "colour": dict(horizontal_flip=True, brightness=0.1, contrast=0.1),
}


@st.composite
def pair_configs(draw):
    return dict(
        source=draw(st.sampled_from(["paths", "directory", "manifest", "tfrecords"])),
        shuffle=draw(st.booleans()),
        seed=draw(st.sampled_from([None, 0, 7])),
        cache=draw(st.sampled_from([None, "memory"])),
        augment=draw(st.sampled_from(sorted(_PAIR_AUGMENTS))),
        resize=draw(st.sampled_from(["stretch", "crop", "pad", "center_crop"])),
        image_size=draw(st.sampled_from([(12, 12), (16, 24), (9, 31)])),
        batch_size=draw(st.sampled_from([None, 1, 3])),
        pipelines=draw(st.integers(1, 2)),
        skip_orphan=draw(st.booleans()),
        mask_pad_value=draw(st.sampled_from([255, 200])),
    )


@given(cfg=pair_configs())
@settings(settings.get_profile(PROFILE))
def test_pair_option_space(pair_corpus, cfg, tmp_path_factory):
    """Pairs: exactly once across pipelines for two epochs, each image with its own mask
    (the class read from the image's colour equals the mask off boundaries), masks uint8
    [h, w, 1] holding classes or the pad value only; an orphan (an image whose mask is
    missing) recorded under "skip"."""
    from tests import seg_data  # pylint: disable=import-outside-toplevel
    note(repr(cfg))
    c = pair_corpus
    images, masks = list(c.images), list(c.masks)
    orphan = None
    if cfg["skip_orphan"] and cfg["source"] in ("paths", "manifest"):
        orphan = images[0]
        masks[0] = os.path.join(c.root, "no-such-mask.png")
    aug = _PAIR_AUGMENTS[cfg["augment"]]
    kw = dict(shuffle=cfg["shuffle"], seed=cfg["seed"], cache=cfg["cache"],
              augment=None if aug is None else pipeline.Augment(**aug), resize=cfg["resize"],
              image_size=cfg["image_size"], batch_size=cfg["batch_size"], include_paths=True,
              mask_pad_value=cfg["mask_pad_value"],
              interpolation="nearest" if cfg["augment"] == "crop" else "bilinear",
              on_error="skip" if orphan else "raise")
    if orphan and cfg["source"] == "manifest":
        manifest = os.path.join(str(tmp_path_factory.mktemp("m")), "pairs.csv")
        with open(c.manifest) as f:
            lines = f.read().splitlines()
        lines[1] = lines[1].split(",")[0] + ",missing.png"
        with open(manifest, "w") as f:
            f.write("\n".join(lines) + "\n")
        kw["root"] = c.root
    else:
        manifest = c.manifest
    seen = []
    for pid in range(cfg["pipelines"]):
        if cfg["pipelines"] > 1:
            kw["input_context"] = tf.distribute.InputContext(cfg["pipelines"], pid)
        if cfg["source"] == "paths":
            ds = pipeline.from_paths(images, masks=masks, **kw)
        elif cfg["source"] == "directory":
            ds = pipeline.from_directory(os.path.join(c.root, "images"),
                                         masks_dir=os.path.join(c.root, "masks"),
                                         mask_suffix="_m", **kw)
        elif cfg["source"] == "manifest":
            ds = pipeline.from_manifest(manifest, mask_column="mask", **kw)
        else:
            ds = pipeline.from_tfrecords(pdata.pair_shards(c, 2), **kw)
        epochs = []
        for _ in range(2):
            got = []
            for x, y, p in ds.as_numpy_iterator():
                if cfg["batch_size"] is None:
                    x, y, p = x[None], y[None], [p]
                assert y.dtype == np.uint8 and y.shape[1:] == tuple(cfg["image_size"]) + (1,)
                assert set(np.unique(y)) <= set(range(len(seg_data.PALETTE))) | {
                    cfg["mask_pad_value"]}
                for xi, yi, pi in zip(x, y, p):
                    mask = np.where(yi == cfg["mask_pad_value"], 255, yi)
                    if cfg["augment"] != "colour":  # (colour jitter moves the class colours;
                        # that it leaves masks alone is tests/sources/test_segmentation.py's)
                        assert seg_data.mismatches(xi, mask) == 0, pi
                    if cfg["augment"] == "crop":  # nearest everywhere: the same classes
                        np.testing.assert_array_equal(seg_data.classes_of(xi), mask[..., 0],
                                                      err_msg=str(pi))
                    got.append(pi.decode())
            epochs.append(sorted(got))
        assert epochs[0] == epochs[1] and len(set(epochs[0])) == len(epochs[0])
        seen += epochs[0]
        if orphan:
            recorded = [e.path for e in pipeline.errors(ds)]
            assert recorded in ([orphan], []) and (recorded or orphan not in seen)
    want = [p for p in c.images if p != orphan]
    assert sorted(seen) == sorted(want)
