"""show_batch: a grid of images from a dataset, titled with class and file names.

File names are honest or absent. A shuffled dataset's elements do not carry
their paths, and ``ds.file_paths`` is in *index* order, so the n-th element of
a shuffled (or sharded, or cached-and-shuffled) epoch is not ``file_paths[n]``.
``show_batch`` therefore never pairs them. Instead, with ``file_names=True``
(the default for a dataset from a ``pipeline`` factory), it builds an
*unshuffled view* of the same dataset: the same index and options (size,
resize, channels, dtype, normalize, augment) but ``shuffle=False``, unbatched,
on a chosen handful of files; the n-th element of that view is the n-th chosen
file, except files whose decoder fails, which the view skips and records
(``on_error="skip"``), so the titles stay aligned. With ``file_names=False``,
or for datasets that do not come from a factory (e.g. after ``.map``), the
first ``num_images`` elements of ``ds`` itself are shown, titled with class
names only.

matplotlib is imported only when ``show_batch`` is called.
"""

from __future__ import annotations

import math
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np

from pipeline import assemble
from pipeline import checks


def _factory_parts(ds):
    """What ``ds`` was built from, when it comes straight from a factory with known paths."""
    try:
        b = assemble.built(ds)
    except ValueError:
        return None
    return b if b.index is not None else None


def _choose_rows(idx, num_images: int, seed: Optional[int]) -> List[int]:
    """Rows of files not known bad: evenly spaced, or a seeded random sample."""
    good = [i for i in range(len(idx)) if i not in idx.errors]
    k = min(num_images, len(good))
    if k == 0:
        return []
    if seed is None:
        picks = np.linspace(0, len(good) - 1, k).round().astype(int)
    else:
        picks = np.sort(np.random.default_rng(seed).choice(len(good), k, replace=False))
    return [good[int(p)] for p in picks]


def _unshuffled_view(b, rows):
    """The factory's dataset rebuilt (the one builder) on ``rows``: unshuffled,
    unbatched, skipping bad files, each element carrying its path last."""
    return b.rebuild(
        source=b.index.subset(rows), shuffle=False, batch_size=None, on_error="skip",
        max_errors=None, input_context=None, service=None, processing_mode="off",
        job_name=None, cache=None, validation_split=None, subset=None, deterministic=True,
        drop_remainder=False, include_paths=True, prefetch_to_device=None)


def _split_element(el) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    if isinstance(el, (tuple, list)):
        return np.asarray(el[0]), (np.asarray(el[1]) if len(el) > 1 else None)
    return np.asarray(el), None


def _take(ds, n: int):
    """First ``n`` (image, label) pairs of ``ds``, batched or not, as numpy."""
    images, labels = [], []
    for el in ds:
        x, y = _split_element(el)
        if x.ndim == 4:  # a batch
            for i in range(x.shape[0]):
                images.append(x[i])
                labels.append(None if y is None else y[i])
                if len(images) == n:
                    return images, labels
        else:
            images.append(x)
            labels.append(y)
        if len(images) >= n:
            break
    return images, labels


def _label_text(y, class_names: Optional[Sequence[str]]) -> str:
    """Class name(s) for an int, one-hot / multi-hot, binary [1] or float label."""
    if y is None:
        return ""
    y = np.asarray(y)
    names = list(class_names) if class_names else None
    if y.ndim == 0:
        if np.issubdtype(y.dtype, np.integer):
            k = int(y)
            return names[k] if names and 0 <= k < len(names) else str(k)
        return f"{float(y):.3g}"
    if y.shape == (1,) and names and len(names) == 2:  # binary
        return names[int(round(float(y[0])))]
    if names and y.shape == (len(names),):
        if np.isclose(y.sum(), 1.0) and y.max() == 1.0:  # one-hot
            return names[int(y.argmax())]
        return ", ".join(n for n, v in zip(names, y) if v > 0.5) or "(none)"
    return np.array2string(y, precision=3, separator=",")


def _displayable(x: np.ndarray) -> np.ndarray:
    """uint8 as is; floats in [0, 1] as is; other floats min-max scaled per image."""
    if x.ndim == 3 and x.shape[-1] == 1:
        x = x[..., 0]
    if x.dtype == np.uint8:
        return x
    x = x.astype(np.float32)
    lo, hi = float(x.min()), float(x.max())
    if lo < -1e-3 or hi > 1 + 1e-3:  # e.g. normalize= or standardized images
        x = (x - lo) / max(hi - lo, 1e-12)
    return np.clip(x, 0.0, 1.0)


@checks.known_keywords()
def show_batch(ds, num_images: int = 16, *, file_names: Optional[bool] = None,
               class_names: Optional[Sequence[str]] = None, columns: Optional[int] = None,
               seed: Optional[int] = None, figsize: Optional[Tuple[float, float]] = None,
               title: Optional[str] = None):
    """Draws a grid of images with their class names and, when known, file names.

    Args:
        ds: a ``tf.data.Dataset`` (or any iterable) of images ``[h, w, c]`` or
            batches ``[b, h, w, c]``, alone or in ``(images, labels, ...)``
            tuples; uint8 (0-255), or float (shown as is when in [0, 1], else
            min-max scaled per image for display); c = 1 (grey), 3 or 4.
            Typically a dataset from ``pipeline.from_directory`` /
            ``from_paths`` / ``from_manifest``, batched or not.
        num_images: int >= 1, images drawn (fewer if the data has fewer).
        file_names: True: title each image with its file name too, from an
            unshuffled view of ``ds`` rebuilt from its index and options (see
            the module docstring; needs a factory dataset with file paths);
            False: show the first elements of ``ds`` as it comes (shuffled,
            augmented, batched), titled with class names only. None (default):
            True when ``ds`` comes from a factory with file paths, else False.
        class_names: names for integer labels; default ``ds.class_names``.
        columns: int >= 1, grid columns; default ceil(sqrt(num_images)).
        seed: with file names, which files: None takes ``num_images`` files
            evenly spaced over the index (so all classes show up); an int
            takes a seeded random sample. Ignored without file names.
        figsize: (width, height) in inches; default 2.2 inches per cell.
        title: optional figure title (str).

    Returns:
        A ``matplotlib.figure.Figure`` (made with ``pyplot``, so notebooks show
        it and ``plt.show()`` works; ``plt.close(fig)`` frees it), with exactly
        one axes per image shown. Each axes title is the class name, then the
        file's base name on a second line when known.

    Raises:
        TypeError: an unknown keyword argument (the message names it and the
            closest valid name).
        ValueError: ``num_images`` or ``columns`` not an int >= 1;
            ``file_names=True`` for a dataset without known file paths; ``ds``
            a ``(train, val)`` tuple; no images in ``ds``.
    """
    try:
        import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise ImportError("pipeline.show_batch needs matplotlib: pip install matplotlib (or, "
                          f"in pipeline's checkout, pip install -e '.[notebooks]'). ({e})") from e

    _check_show_args(ds, num_images, columns)
    parts = _factory_parts(ds)
    if file_names is None:
        file_names = parts is not None
    if file_names and parts is None:
        raise ValueError(
            "`file_names=True` needs a dataset straight from a pipeline factory with "
            "file paths (after .map/.take/.batch, or from TFRecord shards, the paths are "
            f"not known per element). Received: file_names=True, ds={type(ds).__name__}")
    if class_names is None:
        class_names = getattr(ds, "class_names", None)
    if file_names:
        images, labels, names = _named_images(parts, num_images, seed)
    else:
        (images, labels), names = _take(ds, num_images), []
    if not images:
        raise ValueError("`ds` gave no images to show.")
    fig = _draw_grid(plt, images, [_label_text(y, class_names) for y in labels], names,
                     columns, figsize)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _check_show_args(ds, num_images, columns) -> None:
    if isinstance(num_images, bool) or not isinstance(num_images, int) or num_images < 1:
        raise ValueError(f"`num_images` must be an int >= 1. Received: num_images={num_images!r}")
    if columns is not None and (isinstance(columns, bool) or not isinstance(columns, int)
                                or columns < 1):
        raise ValueError(f"`columns` must be None or an int >= 1. Received: columns={columns!r}")
    if isinstance(ds, tuple):
        raise ValueError("`ds` is a tuple (subset='both' gives (train, val)); pass one "
                         f"dataset. Received: ds=tuple of {len(ds)}")


def _named_images(parts, num_images: int, seed):
    """(images, labels, file base names) of ``num_images`` files chosen by ``seed``
    (``_choose_rows``), read through an unshuffled view of the factory's dataset."""
    rows = _choose_rows(parts.index, num_images, seed)
    if not rows:
        raise ValueError(f"No good files to show: all {len(parts.index)} are bad at "
                         "index time.")
    view = _unshuffled_view(parts, rows)
    images, labels, names = [], [], []
    for el in view.take(len(rows)).as_numpy_iterator():
        el, path = el[:-1], el[-1]
        x, y = _split_element(el if len(el) > 1 else el[0])
        images.append(x)
        labels.append(y)
        names.append(os.path.basename(path.decode("utf-8", "replace")))
    return images, labels, names


def _draw_grid(plt, images, texts, names, columns, figsize):
    """A figure with one axes per image, titled by its label text, then its file name."""
    n = len(images)
    cols = columns or math.ceil(math.sqrt(n))
    cols = min(cols, n)
    rows_ = math.ceil(n / cols)
    fig, axes = plt.subplots(rows_, cols, figsize=figsize or (2.2 * cols, 2.4 * rows_),
                             squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k >= n:
            fig.delaxes(ax)
            continue
        img = _displayable(images[k])
        ax.imshow(img, cmap="gray" if img.ndim == 2 else None,
                  vmin=0, vmax=255 if img.dtype == np.uint8 else 1)
        text = texts[k]
        if names:
            text = f"{text}\n{names[k]}" if text else names[k]
        ax.set_title(text, fontsize=8)
        ax.axis("off")
    return fig
