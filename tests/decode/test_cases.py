"""Every file in ../shared/cases has the outcome cases.json states."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import pipeline
from pipeline import stack
from conftest import CASES, drain

# Image decoders: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = [pytest.mark.skipif(not os.path.isdir(CASES), reason="shared cases missing"),
              pytest.mark.stack]

CASE_LIST = json.load(open(os.path.join(CASES, "cases.json"))) if os.path.isdir(CASES) else []
REF = np.load(os.path.join(CASES, "reference.npz")) if os.path.isdir(CASES) else {}


def _ids(cases):
    return [c["file"] for c in cases]


def _one(path, **kw):
    return pipeline.from_paths([path], image_size=None, batch_size=None, shuffle=False, **kw)


def _check_pixels(case, img):
    f = case["file"]
    assert img.dtype == np.uint8 and list(img.shape) == case["shape"]
    ref = REF[f].astype(float)
    diff = np.abs(img.astype(float) - ref)
    if case.get("compare") == "opaque":
        mask = REF[f + "#mask"].astype(bool)
        diff = diff[mask]
    assert diff.mean() <= 3.0, f"{f}: mean abs diff {diff.mean():.2f}"


OK = [c for c in CASE_LIST if c["expect"] == "ok"]
BAD = [c for c in CASE_LIST if c["expect"] == "bad"]
EITHER = [c for c in CASE_LIST if c["expect"] == "either"]
# Decoded by tensorflow-io only: none (TIFF takes the Pillow fallback where its ops do not
# load, tests/decode/test_tiff_avif.py). WebP goes through tf.io.decode_webp where TensorFlow has
# it, else tensorflow-io (files named .webp) or the Pillow fallback (under another name).
TFIO = ()
TFIO_OK = stack.tfio_status().available
DECODABLE = [c for c in OK if TFIO_OK or c["file"] not in TFIO]


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.needs_tfio) if c["file"] in TFIO
                                  else c for c in OK], ids=_ids(OK))
def test_ok_cases_decode_to_reference(case):
    out = list(_one(os.path.join(CASES, case["file"])).as_numpy_iterator())
    assert len(out) == 1
    _check_pixels(case, out[0])


@pytest.mark.parametrize("channels", [1, 4])
def test_ok_cases_every_channel_count(channels):
    paths = [os.path.join(CASES, c["file"]) for c in DECODABLE]
    ds = pipeline.from_paths(paths, image_size=None, batch_size=None, shuffle=False,
                             channels=channels)
    out = list(ds.as_numpy_iterator())
    assert len(out) == len(DECODABLE)
    for case, img in zip(DECODABLE, out):
        h, w, _ = case["shape"]
        assert img.shape == (h, w, channels), case["file"]
        ref = REF[case["file"]].astype(float)
        mask = REF[case["file"] + "#mask"].astype(bool) if case.get("compare") == "opaque" \
            else np.ones((h, w), bool)
        if channels == 1:  # ITU-R 601 luma of the RGB reference
            diff = np.abs(img[..., 0] - ref @ np.array([0.2989, 0.5870, 0.1140]))
            # the luma of JPEG error on the tiny (4x2) EXIF files reaches ~3.6 levels
            assert diff[mask].mean() <= 4.0, case["file"]
        else:
            assert np.abs(img[..., :3] - ref)[mask].mean() <= 3.0, case["file"]
            alpha = img[..., 3]
            assert (alpha[mask] == 255).all(), case["file"]  # opaque where the file is


@pytest.mark.parametrize("case", BAD, ids=_ids(BAD))
def test_bad_cases_raise_naming_the_path(case):
    path = os.path.join(CASES, case["file"])
    with pytest.raises(tf.errors.OpError) as e:
        list(_one(path))
    assert path in str(e.value)


@pytest.mark.parametrize("case", BAD, ids=_ids(BAD))
def test_bad_cases_skipped_and_recorded(case):
    path = os.path.join(CASES, case["file"])
    ds = _one(path, on_error="skip")
    assert drain(ds) == []
    recs = pipeline.errors(ds)
    assert [r.path for r in recs] == [path] and recs[0].reason


def test_bomb_rejected_from_header():
    path = os.path.join(CASES, "bomb_60000x60000.png")
    ds = _one(path, on_error="skip")
    drain(ds)
    assert "60000x60000" in pipeline.errors(ds)[0].reason


@pytest.mark.parametrize("case", EITHER, ids=_ids(EITHER))
def test_either_cases_match_or_name_the_fault(case):
    path = os.path.join(CASES, case["file"])
    ds = _one(path, on_error="skip")
    out = drain(ds)
    if out:
        _check_pixels(case, out[0])
    else:
        reason = pipeline.errors(ds)[0].reason
        assert "IEND" in reason  # the missing end chunk is named


@pytest.mark.parametrize("parallel", [1, 8])
def test_all_cases_in_one_dataset_labels_stay_aligned(parallel):
    files = [c["file"] for c in CASE_LIST]
    paths = [os.path.join(CASES, f) for f in files]
    labels = list(range(len(files)))
    ds = pipeline.from_paths(paths, labels=labels, image_size=(16, 16), batch_size=4,
                             on_error="skip", seed=1, num_parallel_calls=parallel)
    good = {k for k, c in enumerate(CASE_LIST) if c in DECODABLE}
    for _ in range(2):  # every epoch: each good file exactly once, with its label
        ys = [int(v) for _, y in ds for v in y.numpy()]
        assert sorted(ys) == sorted(good | {k for k, c in enumerate(CASE_LIST)
                                            if c["expect"] == "either" and k in ys})
        assert len(ys) == len(set(ys))
    skipped = {r.path for r in pipeline.errors(ds)}
    bad = {paths[k] for k, c in enumerate(CASE_LIST)
           if c["expect"] == "bad" or (c["expect"] == "ok" and c not in DECODABLE)}
    assert bad <= skipped
    assert skipped <= bad | {paths[k] for k, c in enumerate(CASE_LIST) if c["expect"] == "either"}


def test_extension_mismatch_decoded_by_content():
    report = pipeline.scan([os.path.join(CASES, f) for f in
                            ("png_disguised.jpg", "bmp_disguised.jpg", "webp_disguised.jpg")],
                           progress=False)
    assert sorted(m["format"] for m in report.extension_mismatches) == ["bmp", "png", "webp"]
    assert report.num_ok == 3


def test_exif_orientation_can_be_turned_off():
    path = os.path.join(CASES, "exif_orientation_6.jpg")
    assert next(iter(_one(path))).shape == (4, 2, 3)
    assert next(iter(_one(path, exif_orientation=False))).shape == (2, 4, 3)
