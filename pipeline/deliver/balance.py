"""Imbalanced classes: class weights for ``model.fit`` and the class shares of
``sampling=`` (a balanced epoch).

``class_weights`` gives scikit-learn's "balanced" weights (its
``sklearn.utils.class_weight.compute_class_weight("balanced", ...)`` rule,
``n_samples / (n_classes * count)``) from the labels a dataset, an index or a
list holds, without reading any image. ``sampling_shares`` turns the
``sampling`` option into the probability of each class in a resampled epoch
(``pipeline.deliver.plan.rows`` draws the rows from per-class streams with
``tf.data.Dataset.sample_from_datasets``).
"""

from __future__ import annotations

import numbers
import warnings
from typing import Dict, Optional, Sequence

import numpy as np
from absl import logging

from pipeline import checks


def _int_labels(labels, name: str = "labels") -> np.ndarray:
    """Class indices (int64 [n]) from class indices, class names or one-hot rows.

    Raises:
        ValueError: multi-label rows, float (regression) values, negative
            indices, or mixed kinds, naming the first offending value.
    """
    if isinstance(labels, np.ndarray) and labels.dtype.kind in "US":
        labels = labels.tolist()
    if not isinstance(labels, np.ndarray):
        labels = list(labels)
        if labels and all(isinstance(v, str) for v in labels):
            names = sorted(set(labels))
            lookup = {v: i for i, v in enumerate(names)}
            return np.asarray([lookup[v] for v in labels], np.int64)
        if any(isinstance(v, str) for v in labels):
            i = next(i for i, v in enumerate(labels) if not isinstance(v, str))
            raise ValueError(f"`{name}` must be all class indices or all class names. "
                             f"{checks.received(f'{name}[{i}]', labels[i])}")
    if not len(labels):
        return np.zeros([0], np.int64)
    arr = np.asarray(labels)
    if arr.dtype == object:
        raise ValueError(f"`{name}` must be class indices (ints), class names (strs) or "
                         f"one-hot rows. Received: {name} of {type(labels[0]).__name__} values")
    if arr.ndim == 2:
        one_hot = arr.size and np.all((arr == 0) | (arr == 1)) and np.all(arr.sum(axis=1) == 1)
        if not one_hot:
            row = next((i for i, r in enumerate(arr) if not (
                np.all((r == 0) | (r == 1)) and r.sum() == 1)), 0)
            raise ValueError(
                f"Class weights need one class per example; `{name}` holds multi-label or "
                f"vector targets (rows that are not one-hot), for which the 'balanced' rule "
                f"is not defined (weigh each label's loss instead, e.g. "
                f"keras.losses.BinaryFocalCrossentropy). "
                f"{checks.received(f'{name}[{row}]', arr[row].tolist())}")
        return arr.argmax(axis=1).astype(np.int64)
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D class indices or 2-D one-hot rows. "
                         f"Received: {name} of shape {arr.shape}")
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        if arr.dtype.kind != "b":
            raise ValueError(f"`{name}` must be class indices. Received: {name} of dtype "
                             f"{arr.dtype}")
        arr = arr.astype(np.int64)
    if arr.dtype.kind == "f":
        i = int(np.argmax(arr != np.round(arr))) if np.any(arr != np.round(arr)) else 0
        raise ValueError(
            f"Class weights need class indices; `{name}` holds float values (regression "
            "targets), for which the 'balanced' rule is not defined. If they are class "
            f"indices stored as floats, cast them to int first. "
            f"{checks.received(f'{name}[{i}]', arr[i])}")
    if len(arr) and arr.min() < 0:
        i = int(np.argmin(arr))
        raise ValueError(f"`{name}` must be class indices >= 0. "
                         f"{checks.received(f'{name}[{i}]', arr[i])}")
    return arr.astype(np.int64)


def _labels_of(source) -> np.ndarray:
    """The class index of every file a dataset / index / list of labels has."""
    from pipeline.sources import index as index_lib  # pylint: disable=import-outside-toplevel
    idx = None
    if isinstance(source, index_lib.Index):
        idx = source
    elif hasattr(getattr(source, "pipeline_built", None), "options"):
        b = source.pipeline_built  # assemble.Built: what the dataset was built from
        idx = b.index
        if idx is None:
            raise ValueError(
                "class_weights reads the labels a dataset was built from; a TFRecord "
                "dataset does not hold them outside its records. Pass the labels (a "
                "list of class indices) instead. Received: a dataset from from_tfrecords")
        if b.options.label_mode is None:
            raise ValueError("class_weights needs labels; this dataset was built with "
                             "label_mode=None. Received: label_mode=None")
    elif hasattr(source, "element_spec"):
        raise ValueError(
            "class_weights needs a dataset returned by a pipeline factory (it carries its "
            "files' labels; after .map/.batch/.take they are lost), an index, or a list of "
            f"labels. Received: {type(source).__name__}")
    if idx is not None:
        if idx.labels is None:
            raise ValueError("class_weights needs labels; this dataset has none "
                             "(labels=None). Received: labels=None")
        return _int_labels(idx.labels)
    if source is None or isinstance(source, (str, bytes)) or not hasattr(source, "__len__"):
        raise ValueError("class_weights takes a pipeline dataset, an index or a sequence of "
                         f"labels. {checks.received('source', source)}")
    return _int_labels(source)


def class_weights(source) -> Dict[int, float]:
    """Class weights by scikit-learn's "balanced" rule, for ``model.fit(class_weight=)``.

    ``weight[c] = n_samples / (n_classes * count[c])`` (the rule of
    ``sklearn.utils.class_weight.compute_class_weight("balanced", ...)``, which
    follows King and Zeng, "Logistic Regression in Rare Events Data", 2001):
    a class with the average count gets 1.0, a class half as common 2.0, and the
    weighted count of every class is the same. ``n_classes`` is the number of
    classes that have at least one example (a class with none gets no entry: it
    never appears in a batch). Only labels are read, never an image: bad files
    listed in the index count as their class.

    Use it *or* ``sampling="balanced"``, not both (each alone corrects the
    imbalance; both together over-correct): a dataset built with ``sampling``
    gets its weights with a ``UserWarning`` that says so.

    Args:
        source: a dataset returned by ``pipeline.from_directory`` /
            ``from_paths`` / ``from_manifest`` (the files of that dataset or
            subset), a ``pipeline.sources.index.Index``, or a sequence of labels:
            int class indices, str class names (indexed by their sorted order,
            as ``from_paths``), or one-hot rows.

    Returns:
        dict ``{class_index: weight}``: int keys, float values > 0, sorted by
        class.

    Raises:
        ValueError: no labels (``labels=None`` / ``label_mode=None``), an
            empty list, multi-label or vector rows, float (regression)
            labels, negative indices, a TFRecord dataset (pass its labels),
            or a dataset changed by ``.map``/``.batch`` (its files are lost);
            each naming the value received.
    """
    labels = _labels_of(source)
    if not len(labels):
        raise ValueError("class_weights needs at least one label. Received: 0 labels")
    sampling = getattr(getattr(getattr(source, "pipeline_built", None), "options", None),
                       "sampling", None)
    if sampling is not None:
        warnings.warn(
            f"class_weights of a dataset built with sampling={sampling!r}: its epochs are "
            "already resampled, so these weights (of the files as listed) would correct the "
            "imbalance twice. Use class_weight= in fit or sampling=, not both.",
            UserWarning, stacklevel=2)
    counts = np.bincount(labels)
    present = np.flatnonzero(counts)
    n, k = len(labels), len(present)
    return {int(c): float(n / (k * counts[c])) for c in present}


def sampling_shares(sampling, labels: np.ndarray, num_classes: int,
                    class_names: Optional[Sequence[str]] = None) -> np.ndarray:
    """The probability of each class (float64 [num_classes], sums to 1) in a
    resampled epoch.

    Args:
        sampling: "balanced" (every class with files equally likely) or a dict
            ``{class: share}`` (class index or class name -> a number >= 0,
            normalized to sum 1), as checked by ``config.check_sampling``.
        labels: int class index of every row that is drawn from.
        num_classes: the number of classes.
        class_names: names for str keys and messages.

    A class given a share but without files here (an empty folder, or a
    class whose files all went to the validation subset) is logged and left
    out; the other classes' shares are renormalized.

    Raises:
        ValueError: a key that is no class, a class with files but no share,
            or all shares 0 among the classes with files.
    """
    counts = np.bincount(labels, minlength=num_classes)
    names = list(class_names or [])
    if sampling == "balanced":
        shares = (counts > 0).astype(np.float64)
        return shares / shares.sum()
    shares = np.zeros(num_classes, np.float64)
    given, empty = set(), []
    for key, value in sampling.items():
        if isinstance(key, str):
            if key not in names:
                raise ValueError(f"`sampling` names a class that does not exist: {key!r}. "
                                 f"Classes: {names}. {checks.received('sampling', sampling)}")
            c = names.index(key)
        else:
            c = int(key)
            if not 0 <= c < num_classes:
                raise ValueError(f"`sampling` names class index {c}; there are {num_classes} "
                                 f"classes. {checks.received('sampling', sampling)}")
        if value > 0 and counts[c] == 0:
            empty.append(names[c] if names else c)
            value = 0.0
        shares[c] = value
        given.add(c)
    missing = [names[c] if names else int(c) for c in np.flatnonzero(counts) if c not in given]
    if missing:
        raise ValueError(
            f"`sampling` gives no share to class(es) {missing}, which have files: give each "
            f"a share (0 leaves a class out on purpose). {checks.received('sampling', sampling)}")
    if empty:  # e.g. a class whose few files all went to the validation subset
        logging.warning("pipeline: sampling: class(es) %s have a share but no files here "
                        "(this subset); the other classes share their draws", empty)
    if shares.sum() <= 0:
        raise ValueError(f"`sampling` shares sum to 0: no class would be drawn. "
                         f"{checks.received('sampling', sampling)}")
    return shares / shares.sum()

