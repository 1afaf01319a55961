"""Names in two Unicode normal forms: folders made on a Mac (NFD), names typed on Linux (NFC).

Class names are compared in NFC; the files are opened by their real (on-disk) names. Two
folders that are one name in NFC are one class, with a warning; names that differ only by
compatibility forms (a ligature, full-width letters) are named with their code points.
"""

import json
import logging
import os
import unicodedata

import numpy as np
import pytest

import pipeline
from io_helpers import write_image

NFC = lambda s: unicodedata.normalize("NFC", s)  # noqa: E731
NFD = lambda s: unicodedata.normalize("NFD", s)  # noqa: E731
CAFE, CREME = "caf\u00e9", "cr\u00e8me"


@pytest.fixture(scope="module")
def mac_tree(tmp_path_factory):
    """Class folders named in NFD (as macOS writes them), files with NFD names too."""
    root = str(tmp_path_factory.mktemp("nfd") / "classes")
    write_image(os.path.join(root, NFD(CAFE), NFD("d\u00e9j\u00e0.png")), 1)
    write_image(os.path.join(root, NFD(CAFE), "b.png"), 2)
    write_image(os.path.join(root, NFD(CREME), "c.png"), 3)
    write_image(os.path.join(root, "plain", "p.png"), 4)
    assert NFD(CAFE) in os.listdir(root) and CAFE not in os.listdir(root)
    return root


def _values(ds):
    return sorted((int(x[0, 0, 0]), int(y)) for x, y in ds.unbatch().as_numpy_iterator())


def test_class_names_typed_in_nfc_find_nfd_folders(mac_tree):
    ds = pipeline.from_directory(mac_tree, class_names=[CREME, CAFE], image_size=(4, 4),
                                 batch_size=4, shuffle=False)
    assert ds.class_names == [CREME, CAFE]
    assert _values(ds) == [(1, 1), (2, 1), (3, 0)]


def test_inferred_class_names_are_nfc(mac_tree):
    ds = pipeline.from_directory(mac_tree, image_size=(4, 4), batch_size=4, shuffle=False)
    assert ds.class_names == [CAFE, CREME, "plain"]
    assert all(n == NFC(n) for n in ds.class_names)
    assert _values(ds) == [(1, 0), (2, 0), (3, 1), (4, 2)]


def test_nfc_and_nfd_folders_of_one_name_are_one_class_with_a_warning(tmp_path, caplog):
    root = str(tmp_path / "both")
    write_image(os.path.join(root, NFC(CAFE), "a.png"), 1)
    write_image(os.path.join(root, NFD(CAFE), "b.png"), 2)
    write_image(os.path.join(root, "tea", "t.png"), 3)
    with caplog.at_level(logging.WARNING):
        ds = pipeline.from_directory(root, image_size=(4, 4), batch_size=4, shuffle=False)
    assert ds.class_names == [CAFE, "tea"]
    assert _values(ds) == [(1, 0), (2, 0), (3, 1)]
    assert "U+00E9" in caplog.text and "U+0065 U+0301" in caplog.text
    assert "one class" in caplog.text


def test_names_that_differ_by_compatibility_form_are_shown_by_code_point(tmp_path):
    root = str(tmp_path / "compat")
    write_image(os.path.join(root, "\ufb01sh", "a.png"), 1)   # 'ﬁsh' with the fi ligature
    write_image(os.path.join(root, "dog", "b.png"), 2)
    with pytest.raises(ValueError, match=r"U\+FB01") as e:
        pipeline.from_directory(root, class_names=["fish", "dog"], image_size=(4, 4))
    assert "'fish'" in str(e.value)


def test_manifest_nfc_paths_and_labels_find_nfd_files(mac_tree, tmp_path):
    rows = [{"path": os.path.join(CAFE, "d\u00e9j\u00e0.png"), "label": CAFE},
            {"path": os.path.join(CREME, "c.png"), "label": NFD(CREME)},
            {"path": os.path.join("plain", "p.png"), "label": "plain"}]
    manifest = os.path.join(mac_tree, "m.jsonl")
    with open(manifest, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    try:
        ds = pipeline.from_manifest(manifest, class_names=[CAFE, CREME, "plain"],
                                    image_size=(4, 4), batch_size=4, shuffle=False,
                                    include_paths=True)
        got = [(int(x[0, 0, 0]), int(y), p.decode())
               for x, y, p in ds.unbatch().as_numpy_iterator()]
        assert [(v, y) for v, y, _ in got] == [(1, 0), (3, 1), (4, 2)]
        # the files are opened by their on-disk (NFD) names
        assert all(os.path.exists(p) for _, _, p in got)
        assert NFD(CAFE) in got[0][2]
        assert pipeline.scan(manifest, progress=False, root=mac_tree).num_ok == 3
    finally:
        os.remove(manifest)


def test_from_paths_string_labels_in_either_form(mac_tree):
    paths = [os.path.join(mac_tree, NFD(CAFE), "b.png"), os.path.join(mac_tree, "plain", "p.png")]
    ds = pipeline.from_paths(paths, labels=[NFD(CAFE), "plain"], class_names=[CAFE, "plain"],
                             image_size=(4, 4), batch_size=2, shuffle=False)
    assert _values(ds) == [(2, 0), (4, 1)]


def test_segmentation_pairs_match_stems_in_either_form(tmp_path):
    images, masks = str(tmp_path / "images"), str(tmp_path / "masks")
    write_image(os.path.join(images, NFC(CAFE) + ".png"), 1)
    write_image(os.path.join(masks, NFD(CAFE) + ".png"), 0)
    write_image(os.path.join(images, NFD(CREME), "x.png"), 2)
    write_image(os.path.join(masks, NFC(CREME), "x.png"), 0)
    ds = pipeline.from_directory(images, masks_dir=masks, image_size=(4, 4), batch_size=2,
                                 shuffle=False)
    assert sorted(int(x[0, 0, 0]) for x, _ in ds.unbatch().as_numpy_iterator()) == [1, 2]


def test_class_names_that_are_one_name_in_nfc_are_refused_by_code_point(mac_tree):
    with pytest.raises(ValueError, match=r"one name in Unicode NFC.*U\+00E9.*U\+0065 U\+0301"):
        pipeline.from_directory(mac_tree, class_names=[NFC(CAFE), NFD(CAFE)], image_size=(4, 4))
