"""Segmentation input speed: image + mask pairs, ``pipeline`` beside a plain tf.data map
and the Keras recipe, on pairs made from real photos.

The photos of ``--data_dir`` (the first ``--limit``, linked into a temp folder) get a
mask each, written into the temp folder and deleted after the run (never committed):
the photo's luminance (Pillow ``convert("L")``) thresholded into 4 classes (0-63,
64-127, 128-191, 192-255 -> 0-3), saved as a gray PNG (``seg_candidates.mask_of``).
Then the candidates of ``benchmarks/seg_candidates.py`` (see there for what each does)
read the pairs at ``--image_size``, each run in its own fresh process
(``pipeline.tools.bench.harness``), alternated round by round over ``--rounds``, medians reported:

  seg_pipeline        pipeline.from_paths(images, masks=masks)
  seg_pipeline_train  the same + Augment(random_resized_crop, horizontal_flip)
  seg_plain           tf.data paired map: read_file, decode_jpeg + decode_png, resize
  seg_keras           two keras.utils.image_dataset_from_directory (same seed), zipped

Figures: images/s (steady state, after each epoch's first batch) and images per
CPU-second (the process's CPU time and its children's, ``bench.cpu_seconds``; steadier
on a loaded machine), and the ratios of ``seg_pipeline`` to the others. With
``--check_pairs`` (as the tests run it), each candidate also checks that every pair
comes once per epoch and that each mask belongs to its image
(``seg_candidates.CheckedPairs``; it costs time, so it is off for timing).

    python benchmarks/segmentation.py --rounds=3 --epochs=2
    python benchmarks/segmentation.py --limit=48 --rounds=1 --epochs=1 --check_pairs \\
        --json_out=/tmp/seg.json
"""

from __future__ import annotations

import concurrent.futures
import os
import tempfile

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, data_dir as _data_dir
from peer_candidates import symlink_tree  # benchmarks/peer_candidates.py
import seg_candidates  # noqa: F401  (registers the seg_* candidates)
from pipeline.tools.bench import harness as bench
from pipeline import config as config_lib
from pipeline.sources import index as index_lib
from pipeline.tools import sample

HERE = os.path.dirname(os.path.abspath(__file__))
CANDIDATES = ["seg_pipeline", "seg_pipeline_train", "seg_plain", "seg_keras"]

common_flags.define(data_dir="Class-folder photo root (masks are made from its photos).",
                    image_size=224, batch_size=(32, "Batch size (pairs)."),
                    epochs=(2, "Epochs per candidate run."), seed=0, timeout=1800,
                    progress=False, json_out=(os.path.join(HERE, "results", "segmentation.json"),
                                              "JSON result file."))
flags.DEFINE_integer("limit", 0, "Number of pairs (the first N photos, repeated if there are "
                     "fewer); 0 = every photo of --data_dir.")
flags.DEFINE_integer("rounds", 3, "Rounds; the candidates alternate within each round.")
flags.DEFINE_list("candidates", CANDIDATES, f"Candidates to run, in order; any of {CANDIDATES}.")
flags.DEFINE_bool("check_pairs", False, "Check in each candidate that every pair comes once "
                  "per epoch and each mask matches its image (slower: not for timing).")


def write_mask(photo: str, mask_path: str) -> str:
    """Writes the class mask of ``photo`` (``seg_candidates.mask_of``) as a gray PNG, of the
    photo turned upright by its EXIF orientation (a mask of the stored pixels would be a bad
    pair for pipeline, which turns photos upright; the peers, which do not, read those few
    photos with a mask of the other orientation, stretched to the size)."""
    import numpy as np
    from PIL import Image, ImageOps
    with Image.open(photo) as im:  # upright, as pipeline decodes it (exif_orientation=True)
        rgb = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    os.makedirs(os.path.dirname(mask_path), exist_ok=True)
    Image.fromarray(seg_candidates.mask_of(rgb), "L").save(mask_path)
    return mask_path


def make_pairs(src_dir: str, num_pairs: int, out_dir: str):
    """Links ``num_pairs`` photos of ``src_dir`` into ``out_dir/images`` (``symlink_tree``)
    and writes their masks into ``out_dir/masks``; returns (images_dir, masks_dir)."""
    images_dir = symlink_tree(os.path.abspath(src_dir), num_pairs, os.path.join(out_dir, "images"))
    masks_dir = os.path.join(out_dir, "masks")
    images, masks = seg_candidates.pairs(images_dir, masks_dir)
    with concurrent.futures.ThreadPoolExecutor(config_lib.cpu_count()) as pool:
        list(pool.map(write_mask, images, masks))
    return images_dir, masks_dir


def ratios(results):
    """``seg_pipeline`` (and ``seg_pipeline_train``) over the others, images/s and per
    CPU-second (None when a figure is missing)."""
    out = {}
    for key, suffix in (("images_per_sec", ""), ("steady_images_per_cpu_sec", "_cpu")):
        for other in ("seg_plain", "seg_keras"):
            out[f"pipeline_vs_{other[4:]}{suffix}"] = bench.ratio(results, "seg_pipeline",
                                                                  other, key)
        out[f"train_vs_eval{suffix}"] = bench.ratio(results, "seg_pipeline_train",
                                                    "seg_pipeline", key)
    return out


def run(src_dir, candidates, limit=0, image_size=224, batch_size=32, epochs=2, rounds=3,
        seed=0, timeout=1800, check_pairs=False, progress=False):
    """Makes the pairs in a temp folder, runs the candidates; returns the result dict."""
    num_pairs = limit or len(index_lib.index_directory(src_dir))
    with tempfile.TemporaryDirectory(prefix="pipeline-seg-bench-") as tmp:
        images_dir, masks_dir = make_pairs(src_dir, num_pairs, tmp)
        spec = {"data_dir": images_dir, "masks_dir": masks_dir,
                "image_size": [image_size, image_size], "batch_size": batch_size,
                "epochs": epochs, "seed": seed, "num_images": num_pairs,
                "check_pairs": check_pairs}
        results = bench.run_candidates(candidates, spec, repeats=rounds, progress=progress,
                                       keep_going=True, timeout=timeout)
    return {"benchmark": "segmentation", "data_dir": sample.data_dir_label(src_dir),
            "num_pairs": num_pairs, "image_size": image_size, "batch_size": batch_size,
            "epochs": epochs, "rounds": rounds, "cores": config_lib.cpu_count(),
            "check_pairs": check_pairs, "masks": "luminance in 4 classes, gray PNG",
            "candidates": results, "ratios": ratios(results),
            "failed": {n: r["error"] for n, r in results.items() if "error" in r}}


def main(argv):
    del argv
    for c in FLAGS.candidates:
        if c not in CANDIDATES:
            raise app.UsageError(f"--candidates: unknown {c!r}; known: {CANDIDATES}. "
                                 f"Received: {FLAGS.candidates!r}")
    out = run(_data_dir(FLAGS.data_dir), FLAGS.candidates, FLAGS.limit, FLAGS.image_size,
              FLAGS.batch_size, FLAGS.epochs, FLAGS.rounds, FLAGS.seed, FLAGS.timeout,
              FLAGS.check_pairs, FLAGS.progress)
    bench.write_json(FLAGS.json_out, out)
    print(bench.format_table(out["candidates"], reference="seg_pipeline"))
    for line in bench.headline(out["candidates"], reference="seg_pipeline"):
        print(line)
    for n, err in out["failed"].items():
        print(f"FAILED {n}: {err.strip().splitlines()[-1] if err.strip() else err}")
    print(f"wrote {FLAGS.json_out}")


if __name__ == "__main__":
    app.run(main)
