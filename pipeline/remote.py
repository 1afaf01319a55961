"""Object storage (``s3://``, ``hdfs://``, ``az://``, ``http://``) through tensorflow-io.

tensorflow-io registers these filesystems with TensorFlow when imported; it is
imported here lazily, only when a URI needs it (``gs://`` is built into
TensorFlow). Listing uses ``tf.io.gfile``, whose ``glob`` on ``s3://`` returns
paths unsorted: results are sorted here so that order (and labels) are stable.

S3 configuration is read from the environment by tensorflow-io:
``S3_ENDPOINT`` (with its scheme, e.g. ``http://127.0.0.1:9000``),
``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``S3_USE_HTTPS`` and ``S3_VERIFY_SSL``.
"""

from __future__ import annotations

import posixpath
from typing import List

import tensorflow as tf

from pipeline import config
from pipeline import index as index_lib

TFIO_SCHEMES = ("s3", "hdfs", "viewfs", "az", "http", "https")


def scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else ""


def ensure_filesystem(uri: str) -> None:
    """Imports tensorflow-io when ``uri``'s scheme needs it (s3, hdfs, az, http)."""
    if scheme(uri) in TFIO_SCHEMES:
        try:
            import tensorflow_io  # noqa: F401  registers the filesystems
        except ImportError as e:  # pragma: no cover - tensorflow-io is a dependency
            raise ImportError(f"Reading {uri!r} needs tensorflow-io "
                              "(pip install tensorflow-io)") from e


def hint(error: Exception, uri: str) -> str:
    """``error``'s message plus a hint for the usual s3:// misconfigurations (see NOTES.md).

    Without tensorflow-io imported, TensorFlow answers ``s3://`` paths with
    ``NotFoundError``; so it does when ``S3_ENDPOINT`` lacks its scheme.
    """
    import os
    import sys
    msg = str(error)
    if scheme(uri) != "s3":
        return msg
    if "tensorflow_io" not in sys.modules:
        msg += (" (hint: s3:// needs tensorflow-io imported (`import tensorflow_io`); "
                "without it TensorFlow answers s3:// paths with NotFoundError)")
    endpoint = os.environ.get("S3_ENDPOINT", "")
    if endpoint and "://" not in endpoint:
        msg += (f" (hint: S3_ENDPOINT={endpoint!r} has no scheme; use e.g. "
                f"'http://{endpoint}' with S3_USE_HTTPS=0)")
    return msg


def _list(folder: str) -> List[str]:
    try:
        return sorted(tf.io.gfile.listdir(folder))
    except tf.errors.NotFoundError as e:
        raise FileNotFoundError(f"`directory` does not exist or cannot be listed: "
                                f"{folder!r}: {hint(e, folder)}") from None


def _walk_images(folder: str) -> List[str]:
    out = []
    for name in _list(folder):
        if name.startswith(".") or name.startswith("__MACOSX"):
            continue
        child = posixpath.join(folder, name.rstrip("/"))
        if name.endswith("/") or tf.io.gfile.isdir(child):
            out.extend(_walk_images(child))
        elif posixpath.splitext(name)[1].lower() in index_lib.IMAGE_EXTENSIONS:
            out.append(child)
    return sorted(out)


def index_directory(directory: str, labels="inferred", class_names=None) -> index_lib.Index:
    """Lists a remote folder of class sub-folders into an ``Index`` (sorted paths).

    Same rules as ``index.index_directory`` (class names are the sorted
    sub-folder names, hidden entries and non-image extensions ignored); files are
    not sniffed (their formats are found in graph).

    Raises:
        FileNotFoundError: the folder cannot be listed (with an s3 hint).
        ValueError: no class folders, an unknown class name, or no images.
    """
    ensure_filesystem(directory)
    directory = directory.rstrip("/")
    class_names = config.check_class_names(class_names)
    paths: List[str] = []
    label_list = None
    if isinstance(labels, str) and labels == "inferred":
        subdirs = [n.rstrip("/") for n in _list(directory)
                   if not n.startswith(".") and (n.endswith("/") or tf.io.gfile.isdir(
                       posixpath.join(directory, n)))]
        subdirs = sorted(set(subdirs))
        if not subdirs:
            raise ValueError("`labels='inferred'` needs class sub-folders, but the directory "
                             f"has none. Received: directory={directory!r}")
        if class_names is not None:
            missing = [c for c in class_names if c not in subdirs]
            if missing:
                raise ValueError(f"`class_names` names folder(s) that do not exist in "
                                 f"{directory!r}: {missing}. Received: class_names={class_names!r}")
        else:
            class_names = subdirs
        label_list = []
        for k, name in enumerate(class_names):
            files = _walk_images(posixpath.join(directory, name))
            paths.extend(files)
            label_list.extend([k] * len(files))
    else:
        paths = _walk_images(directory)
        if labels is not None:
            label_list = list(labels)
            if len(label_list) != len(paths):
                raise ValueError(f"`labels` has {len(label_list)} entries but {directory!r} has "
                                 f"{len(paths)} image files. Received: labels=<{len(label_list)} items>")
    if not paths:
        raise ValueError(f"No image files found in `directory`. Received: directory={directory!r}")
    return index_lib.Index(paths, label_list, class_names, [index_lib.FileInfo(p) for p in paths])
