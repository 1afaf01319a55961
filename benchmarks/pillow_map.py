"""The per-element functions that peers run in worker processes: Pillow and numpy only.

Grain's ``mp_prefetch`` starts its workers with ``spawn``, and each worker imports the
module of every function it is handed; ``benchmarks/peer_candidates.py`` imports TensorFlow,
this module does not (``pipeline.tools.bench.candidates`` imports none either), so a worker starts
in well under a second instead of loading TensorFlow.
"""

import numpy as np

from pipeline.tools.bench.candidates import pil_load


def grain_load(item):
    """Grain's per-element map: ``(path, label, height, width)`` -> (uint8 [h, w, 3],
    int32 label), by ``pipeline.tools.bench.candidates.pil_load`` (Pillow decode, RGB, bilinear
    resize, which Pillow widens by the reduction factor)."""
    path, label, h, w = item
    return pil_load(path, (h, w)), np.int32(label)


def grain_stack(items):
    """Grain's ``batch_fn``: a list of (image, label) -> (uint8 [b, h, w, 3], int32 [b])."""
    return (np.stack([x for x, _ in items]), np.asarray([y for _, y in items], np.int32))
