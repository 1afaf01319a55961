"""pipeline.show_batch: grid size, titles (class + file names), dtypes, errors."""

import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from PIL import Image  # noqa: E402

import pipeline  # noqa: E402

NUM = 12  # 3 classes x 4 images


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Class folders of solid-colour PNGs; image k has pixel value 10 * k."""
    root = tmp_path_factory.mktemp("vis")
    for k in range(NUM):
        cls = root / f"cls_{k % 3}"
        cls.mkdir(exist_ok=True)
        Image.fromarray(np.full((20, 30, 3), 10 * k, np.uint8)).save(cls / f"img_{k:02d}.png")
    return str(root)


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _visible_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def _titles(fig):
    return [ax.get_title() for ax in fig.axes]


def test_file_names_from_unshuffled_view(folder):
    ds = pipeline.from_directory(folder, image_size=(16, 16), batch_size=4, seed=1)
    fig = pipeline.show_batch(ds, num_images=6)
    assert isinstance(fig, matplotlib.figure.Figure)
    assert len(fig.axes) == 6
    titles = _titles(fig)
    for t, ax in zip(titles, fig.axes):
        cls, name = t.split("\n")
        # the class in the title is the folder the named file sits in
        path = [p for p in ds.file_paths if os.path.basename(p) == name]
        assert len(path) == 1 and os.path.basename(os.path.dirname(path[0])) == cls
        # and the pixels drawn are that file's pixels (value 10 * k)
        k = int(name[4:6])
        shown = ax.get_images()[0].get_array()
        assert int(np.asarray(shown).mean()) == 10 * k
    # evenly spaced over the index: every class appears
    assert {t.split("\n")[0] for t in titles} == {"cls_0", "cls_1", "cls_2"}


def test_seeded_sample_is_repeatable(folder):
    ds = pipeline.from_directory(folder, image_size=(16, 16), batch_size=None)
    a = _titles(pipeline.show_batch(ds, num_images=5, seed=3))
    b = _titles(pipeline.show_batch(ds, num_images=5, seed=3))
    assert a == b and len(a) == 5


def test_shuffled_stream_has_class_names_only(folder):
    ds = pipeline.from_directory(folder, image_size=(16, 16), batch_size=5, seed=0,
                                 dtype=tf.float32)
    fig = pipeline.show_batch(ds, num_images=7, file_names=False, columns=4)
    assert len(fig.axes) == 7
    for t, ax in zip(_titles(fig), fig.axes):
        assert t in ds.class_names  # no file name claimed
        k = round(float(np.asarray(ax.get_images()[0].get_array()).mean()) * 255 / 10)
        assert t == f"cls_{k % 3}"  # label pairs with its pixels after shuffle + batch


def test_mapped_dataset_falls_back_and_categorical_labels(folder):
    ds = pipeline.from_directory(folder, image_size=(16, 16), batch_size=4,
                                 label_mode="categorical", seed=0)
    mapped = ds.map(lambda x, y: (x, y))
    fig = pipeline.show_batch(mapped, num_images=4, class_names=ds.class_names)
    assert len(fig.axes) == 4
    assert all(t in ds.class_names for t in _titles(fig))
    with pytest.raises(ValueError, match="file_names=True"):
        pipeline.show_batch(mapped, file_names=True)


def test_more_images_than_files_and_grey(folder):
    ds = pipeline.from_directory(folder, image_size=(8, 8), channels=1, batch_size=None)
    fig = pipeline.show_batch(ds, num_images=50)
    assert len(fig.axes) == NUM


def test_bad_file_is_skipped_and_names_stay_aligned(tmp_path):
    for k in range(4):
        Image.fromarray(np.full((10, 10, 3), 50 * k, np.uint8)).save(tmp_path / f"f{k}.png")
    data = (tmp_path / "f1.png").read_bytes()
    (tmp_path / "f1.png").write_bytes(data[: len(data) // 2])  # truncated PNG
    paths = sorted(str(p) for p in tmp_path.iterdir())
    ds = pipeline.from_paths(paths, image_size=(10, 10), batch_size=2)
    fig = pipeline.show_batch(ds, num_images=4)
    titles = _titles(fig)
    assert titles == ["f0.png", "f2.png", "f3.png"]
    for t, ax in zip(titles, fig.axes):
        assert int(np.asarray(ax.get_images()[0].get_array()).mean()) == 50 * int(t[1])


def test_bad_arguments(folder):
    ds = pipeline.from_directory(folder, image_size=(8, 8))
    with pytest.raises(ValueError, match="num_images=0"):
        pipeline.show_batch(ds, num_images=0)
    with pytest.raises(ValueError, match="columns=0"):
        pipeline.show_batch(ds, columns=0)
    both = pipeline.from_directory(folder, image_size=(8, 8), validation_split=0.5,
                                   subset="both", seed=0)
    with pytest.raises(ValueError, match="tuple"):
        pipeline.show_batch(both)
