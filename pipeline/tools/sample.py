"""A built-in sample of deterministic JPEGs, so ``bench`` runs on a fresh machine.

The images are smooth random colour fields with fine noise (so that their
JPEG sizes are close to real photos'), in class folders: by default
300-600 pixels per side (20-90 KB each, ``make_image``); with ``size`` (e.g.
``SAMPLES["large"]``, 4000x3000: a 12 MP camera's photos, about 2.9 MB each,
``make_photo``) every image that size, large enough for reduced-scale (DCT)
JPEG decoding to apply. The same ``num_images``/``num_classes``/``seed``/``size``
always give byte-identical files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Tuple

import numpy as np

__all__ = ["cache_root", "data_dir_label", "default_data_dir", "ensure_sample", "make_image",
           "make_photo", "sample_dir", "sample_note", "sample_size"]

SAMPLE_VERSION = 1
# The built-in samples by name: None, sides drawn in 300-600 pixels; else (height, width).
SAMPLES = {"small": None, "large": (3000, 4000)}


def cache_root() -> str:
    """``$PIPELINE_CACHE``, else ``$XDG_CACHE_HOME/pipeline``, else ``~/.cache/pipeline``."""
    root = os.environ.get("PIPELINE_CACHE")
    if root:
        return root
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pipeline")


def make_image(rng: np.random.RandomState, height: int, width: int) -> np.ndarray:
    """A smooth colour field plus noise: uint8 [height, width, 3]."""
    from PIL import Image

    coarse = rng.randint(0, 256, size=(rng.randint(3, 9), rng.randint(3, 9), 3)).astype(np.uint8)
    img = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), np.int16)
    img = img + rng.randint(-12, 13, size=img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def make_photo(rng: np.random.RandomState, height: int, width: int):
    """``make_image``'s look at camera sizes, several times faster: a smooth colour field
    (bilinear) plus a 256x256 tile of the same noise repeated. A ``PIL.Image`` (RGB)."""
    from PIL import Image, ImageChops

    coarse = rng.randint(0, 256, size=(rng.randint(3, 9), rng.randint(3, 9), 3)).astype(np.uint8)
    field = Image.fromarray(coarse).resize((width, height), Image.BILINEAR)
    tile = Image.fromarray(rng.randint(0, 25, size=(256, 256, 3)).astype(np.uint8))
    noise = Image.new("RGB", (width, height))
    for y in range(0, height, 256):
        for x in range(0, width, 256):
            noise.paste(tile, (x, y))
    return ImageChops.add(field, noise, 1.0, -12)  # field + noise in [-12, 12], clipped


def sample_size(kind: str):
    """The image size of the built-in sample named ``kind`` (``SAMPLES``): None (sides
    drawn in 300-600 pixels) or (height, width) in pixels.

    Raises:
        ValueError: ``kind`` is not a name of ``SAMPLES``.
    """
    if kind not in SAMPLES:
        raise ValueError(f"`sample` must be one of {', '.join(repr(k) for k in SAMPLES)}. "
                         f"Received: sample={kind!r}")
    return SAMPLES[kind]


def sample_dir(num_images: int = 256, num_classes: int = 4, seed: int = 0,
               root: str | None = None, size=None) -> str:
    """The folder ``ensure_sample`` writes for these arguments (it may not exist yet)."""
    name = f"sample-v{SAMPLE_VERSION}-n{num_images}-c{num_classes}-s{seed}"
    if size is not None:
        name += f"-{size[1]}x{size[0]}"
    return os.path.join(root or cache_root(), name)


def ensure_sample(num_images: int = 256, num_classes: int = 4, seed: int = 0,
                  root: str | None = None, size=None) -> str:
    """Creates (once) and returns a folder of ``num_images`` JPEGs in class folders.

    Args:
        num_images: int >= 1, images in all.
        num_classes: int >= 1, class folders ``class_0`` ... (images dealt round-robin).
        seed: int, seeds sizes and pixels.
        root: parent folder; default ``cache_root()``.
        size: None (default): sides drawn in 300-600 pixels (``make_image``); else
            (height, width) in pixels of every image (``make_photo``), e.g.
            ``SAMPLES["large"]``; the folder's name ends in ``-WIDTHxHEIGHT``.

    Returns:
        str, the sample folder (``sample_dir``). It is written to a temporary
        folder and renamed into place, so a half-written sample is never used.

    Raises:
        ValueError: ``num_images`` or ``num_classes`` < 1.
    """
    from PIL import Image

    if num_images < 1:
        raise ValueError(f"`num_images` must be >= 1. Received: num_images={num_images}")
    if num_classes < 1:
        raise ValueError(f"`num_classes` must be >= 1. Received: num_classes={num_classes}")
    final = sample_dir(num_images, num_classes, seed, root, size)
    if os.path.isdir(final):
        return final
    root, name = os.path.split(final)
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=name + ".tmp", dir=root)
    try:
        rng = np.random.RandomState(seed)
        for k in range(num_images):
            cls = os.path.join(tmp, f"class_{k % num_classes}")
            os.makedirs(cls, exist_ok=True)
            path = os.path.join(cls, f"img_{k:05d}.jpg")
            if size is None:
                h, w = rng.randint(300, 601), rng.randint(300, 601)
                Image.fromarray(make_image(rng, h, w)).save(path, quality=90)
            else:
                make_photo(rng, *size).save(path, quality=90)
        try:
            os.rename(tmp, final)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


DATA_DIR_ENV = "PIPELINE_DATA_DIR"


def repository_dir() -> str:
    """The folder above the ``pipeline`` package (the repository in a checkout)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def shared_dir(*parts: str):
    """``../shared/<parts>`` next to the repository when it exists, else None.

    The project keeps real photos and unusual files in a ``shared`` folder
    beside its checkout; a fresh clone has none, and nothing needs it.
    """
    path = os.path.normpath(os.path.join(repository_dir(), os.pardir, "shared", *parts))
    return path if os.path.exists(path) else None


def default_data_dir(data_dir: str | None = None, num_images: int = 256,
                     num_classes: int = 4, shared: bool = True, size=None) -> str:
    """The data folder of the benchmarks, notebooks and ``pipeline bench``.

    The first of: ``data_dir`` (a flag or parameter) when given;
    ``$PIPELINE_DATA_DIR`` when set; ``../shared/data/imagenet-sample``
    relative to the repository when it exists; else the built-in sample
    (``ensure_sample(num_images, num_classes, size=size)``, generated once, no
    network).
    Benchmarks and notebooks call this, so that none names a machine path.

    Args:
        data_dir: str or None, an explicit folder (returned as given).
        num_images, num_classes, size: the built-in sample's, when it is used
            (``ensure_sample``).
        shared: look for ``../shared/data/imagenet-sample`` (False: go from
            the environment variable straight to the built-in sample, as the
            quick-start ``pipeline bench`` does, so that its figure is the one
            any fresh clone gets).

    Returns:
        str, a folder path.

    Raises:
        FileNotFoundError: ``$PIPELINE_DATA_DIR`` is set but is not a folder
            (a typo there should not silently measure other data).
    """
    if data_dir:
        return os.fspath(data_dir)
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        if not os.path.isdir(env):
            raise FileNotFoundError(
                f"${DATA_DIR_ENV} is not a folder: {env!r}. Unset it to use the built-in "
                "sample, or point it at a folder of class sub-folders.")
        return env
    found = shared_dir("data", "imagenet-sample") if shared else None
    if found and os.path.isdir(found):
        return found
    return ensure_sample(num_images, num_classes, size=size)


def folder_bytes(folder: str) -> Tuple[int, int]:
    """(files, bytes) of the regular files under ``folder``."""
    files = size = 0
    for dirpath, _, names in os.walk(folder):
        for n in names:
            try:
                size += os.stat(os.path.join(dirpath, n)).st_size
                files += 1
            except OSError:
                pass
    return files, size


def sample_note(folder: str) -> str:
    """The line ``bench`` prints before using the built-in sample: where it is written
    (``cache_root()``, moved by ``$PIPELINE_CACHE``), how big it is, and that it is
    written once and reused, e.g. "built-in sample: 512 generated JPEGs, 9.4 MB, in
    ~/.cache/pipeline/sample-v1-n512-c4-s0 (written once, reused; set
    $PIPELINE_CACHE to put it elsewhere, delete the folder to free the space)"."""
    files, size = folder_bytes(folder)
    return (f"built-in sample: {files} generated JPEGs, {size / 1e6:.1f} MB, in {folder} "
            "(written once, reused; set $PIPELINE_CACHE to put it elsewhere, delete the "
            "folder to free the space)")


def data_dir_label(path: str) -> str:
    """A name for a data folder that holds no absolute machine path (for results files).

    ``../shared/...`` for the shared folder, ``<built-in sample NAME>`` for a
    generated sample, a path relative to the current folder when under it,
    else ``<...>/`` and the folder's last two parts.
    """
    real = os.path.realpath(path)
    shared = shared_dir()
    if shared and (real == os.path.realpath(shared) or
                   real.startswith(os.path.realpath(shared) + os.sep)):
        return "../shared/" + os.path.relpath(real, os.path.realpath(shared)).replace(os.sep, "/")
    if os.path.basename(real).startswith(f"sample-v{SAMPLE_VERSION}-"):
        return f"<built-in sample {os.path.basename(real)}>"
    rel = os.path.relpath(real, os.getcwd())
    if not rel.startswith(os.pardir):
        return rel.replace(os.sep, "/")
    return "<...>/" + "/".join(real.split(os.sep)[-2:])
