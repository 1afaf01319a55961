"""Does the pipeline keep the accelerator busy? Train steps fed by it vs synthetic batches.

One Keras model (random weights), one compiled train step, two feeds, alternated
``--repeats`` times in this one process:

  synthetic  one random uint8 batch held in memory, repeated
             (``Dataset.from_tensors(batch).repeat()``): the step's own speed;
  pipeline   ``pipeline.from_directory(..., drop_remainder=True).repeat()``.

Each run is ``--warmup`` + ``--steps`` steps of ``Model.fit``; a callback times
the steps after the warm-up. ``ratio = pipeline / synthetic`` images/s: 1.0
means the input pipeline never starves the model.

Models: ``resnet50`` (``keras.applications.ResNet50``, random weights, logits;
``mixed_float16`` on GPU) or ``small`` (two strided convs + dense, float32:
a CPU smoke test). ``--model=auto`` (default) is resnet50 when a GPU is
visible, small otherwise. The input is uint8; the model rescales to [0, 1].

Full size (on a GPU machine)::

    python benchmarks/gpu_saturation.py --json_out=gpu_saturation.json

Tiny smoke run (CPU; ``--smoke`` = the small model, 64 photos, 32x32, batch 8,
3 + 1 steps, 1 round; a test runs it so the script cannot rot)::

    python benchmarks/gpu_saturation.py --smoke --json_out=/tmp/gs.json

The same code path as the GPU run with ResNet-50 and mixed precision, on CPU
(slow, a minute or two; not in the tests)::

    python benchmarks/gpu_saturation.py --model=resnet50 --mixed_precision=on \
        --num_images=32 --image_size=64 --batch_size=4 --steps=2 --warmup=1 --repeats=1
"""

import os
import statistics
import tempfile
import time

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, data_dir as _data_dir
from peer_candidates import symlink_tree  # benchmarks/peer_candidates.py
from pipeline.tools import sample

common_flags.define(data_dir="Class-folder photo root.", num_images=0,
                    image_size=(224, "Input height and width (pixels)."), batch_size=64,
                    repeats=(2, "Alternating rounds (synthetic, pipeline)."),
                    json_out="gpu_saturation.json", png_out=None)
flags.DEFINE_integer("sample_images", 0, "Use pipeline's built-in generated sample of N "
                     "JPEGs instead of --data_dir (for machines without the photos).")
flags.DEFINE_enum("model", "auto", ["auto", "small", "resnet50"], "Model trained.")
flags.DEFINE_enum("mixed_precision", "auto", ["auto", "on", "off"],
                  "mixed_float16 (auto: on when a GPU is visible).")
flags.DEFINE_integer("steps", 100, "Timed train steps per run.")
flags.DEFINE_integer("warmup", 10, "Untimed steps at the start of each run.")
flags.DEFINE_bool("smoke", False, "A seconds-long CPU smoke run: --model=small, "
                  "--num_images=64 (unless given), --image_size=32, --batch_size=8, "
                  "--steps=3, --warmup=1, --repeats=1.")

SMOKE = {"model": "small", "image_size": 32, "batch_size": 8, "steps": 3, "warmup": 1,
         "repeats": 1}


def build_model(kind, image_size, num_classes):
    """A compiled Keras classifier taking uint8 [b, h, w, 3] (rescaled inside)."""
    import keras
    inputs = keras.Input((image_size, image_size, 3), dtype="uint8")
    x = keras.layers.Rescaling(1.0 / 255)(inputs)
    if kind == "resnet50":
        x = keras.applications.ResNet50(weights=None, include_top=False,
                                        input_shape=(image_size, image_size, 3))(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
    else:
        x = keras.layers.Conv2D(16, 3, strides=2, activation="relu")(x)
        x = keras.layers.Conv2D(32, 3, strides=2, activation="relu")(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes, dtype="float32")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def timed_fit(model, ds, warmup, steps, batch_size):
    """Fits ``warmup + steps`` steps; returns images/s over the timed steps."""
    import keras
    times = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter())

    model.fit(ds, epochs=1, steps_per_epoch=warmup + steps, verbose=0, shuffle=False,
              callbacks=[Timer()])
    return steps * batch_size / (times[-1] - times[warmup - 1])


def run(data_dir, model_kind="auto", mixed="auto", image_size=224, batch_size=64, steps=100,
        warmup=10, repeats=2):
    import keras
    import numpy as np
    import tensorflow as tf
    import pipeline

    gpus = tf.config.list_physical_devices("GPU")
    kind = model_kind if model_kind != "auto" else ("resnet50" if gpus else "small")
    use_mixed = mixed == "on" or (mixed == "auto" and bool(gpus))
    if use_mixed:
        keras.mixed_precision.set_global_policy("mixed_float16")
    ds_pipe = pipeline.from_directory(data_dir, image_size=(image_size, image_size),
                                      batch_size=batch_size, seed=0, drop_remainder=True)
    num_classes = len(ds_pipe.class_names)
    n_files = len(ds_pipe.file_paths)
    if n_files < batch_size:
        raise ValueError(f"need at least batch_size files. Received: {n_files} files in "
                         f"{data_dir!r}, batch_size={batch_size}")
    rng = np.random.RandomState(0)
    x = rng.randint(0, 256, (batch_size, image_size, image_size, 3)).astype(np.uint8)
    y = rng.randint(0, num_classes, (batch_size,)).astype(np.int64)
    feeds = {"synthetic": tf.data.Dataset.from_tensors((x, y)).repeat(),
             "pipeline": ds_pipe.repeat()}
    model = build_model(kind, image_size, num_classes)
    runs = {k: [] for k in feeds}
    for _ in range(repeats):
        for name, ds in feeds.items():
            runs[name].append(timed_fit(model, ds, warmup, steps, batch_size))
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {"benchmark": "gpu_saturation", "model": kind, "mixed_precision": use_mixed,
            "gpus": [g.name for g in gpus], "device": "GPU" if gpus else "CPU",
            "data_dir": sample.data_dir_label(data_dir), "num_files": n_files, "num_classes": num_classes,
            "image_size": image_size, "batch_size": batch_size, "steps": steps,
            "warmup": warmup, "repeats": repeats,
            "synthetic_images_per_sec": med["synthetic"],
            "pipeline_images_per_sec": med["pipeline"],
            "runs_images_per_sec": runs, "ratio": med["pipeline"] / med["synthetic"]}


def main(argv):
    del argv
    if FLAGS.smoke:
        for name, value in SMOKE.items():
            setattr(FLAGS, name, value)
        if not FLAGS.num_images and not FLAGS.sample_images:
            FLAGS.num_images = 64
    FLAGS.data_dir = _data_dir(FLAGS.data_dir)
    import charts  # benchmarks/charts.py (matplotlib)
    from pipeline.tools.bench import harness as bench
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = FLAGS.data_dir
        if FLAGS.sample_images:
            data_dir = sample.ensure_sample(FLAGS.sample_images)
        elif FLAGS.num_images:
            data_dir = symlink_tree(FLAGS.data_dir, FLAGS.num_images,
                                    os.path.join(tmp, "data"))
        out = run(data_dir, FLAGS.model, FLAGS.mixed_precision, FLAGS.image_size,
                  FLAGS.batch_size, FLAGS.steps, FLAGS.warmup, FLAGS.repeats)
    out["source_dir"] = sample.data_dir_label(FLAGS.data_dir)
    out["smoke"] = FLAGS.smoke
    png = FLAGS.png_out or os.path.splitext(FLAGS.json_out)[0] + ".png"
    out["png"] = charts.bar_chart(
        png, ["synthetic", "pipeline"],
        {"images/s": [out["synthetic_images_per_sec"], out["pipeline_images_per_sec"]]},
        f"{out['model']} train step on {out['device']}: pipeline / synthetic = "
        f"{out['ratio']:.2f}", "images/s")
    bench.write_json(FLAGS.json_out, out)
    print(f"{out['model']} on {out['device']} (mixed_float16={out['mixed_precision']}): "
          f"synthetic {out['synthetic_images_per_sec']:.0f} images/s, pipeline "
          f"{out['pipeline_images_per_sec']:.0f} images/s, ratio {out['ratio']:.2f}")
    print(f"wrote {FLAGS.json_out} and {png}")


if __name__ == "__main__":
    app.run(main)
