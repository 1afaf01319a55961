"""Run by tests/test_keras_backends.py in a subprocess whose KERAS_BACKEND is set (it must be
before keras is imported): fits, evaluates and predicts tiny models on pipeline datasets, and
prints one JSON object of what happened. Usage: python keras_backend_child.py DATA_DIR
[SCENARIO,SCENARIO...] (default: every scenario)."""

import json
import math
import os
import sys
import traceback

import keras
import numpy as np
import tensorflow as tf

import pipeline

ROOT = sys.argv[1]
ONLY = set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None
SIDE = 16
BATCH = 4
out = {"backend": keras.backend.backend()}


class Steps(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.train = self.test = self.predict = 0

    def on_train_batch_end(self, batch, logs=None):
        self.train += 1

    def on_test_batch_end(self, batch, logs=None):
        self.test += 1

    def on_predict_batch_end(self, batch, logs=None):
        self.predict += 1


def model(n_out, activation, loss, channels=3):
    keras.utils.set_random_seed(0)
    m = keras.Sequential([
        keras.Input((SIDE, SIDE, channels)),
        keras.layers.Rescaling(1 / 255),
        keras.layers.Conv2D(4, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(n_out, activation=activation)])
    m.compile(optimizer="adam", loss=loss, metrics=["accuracy"])
    return m


def run(m, train, val=None, predict_ds=None):
    steps = Steps()
    hist = m.fit(train, validation_data=val, epochs=1, verbose=0, callbacks=[steps])
    ev = m.evaluate(val if val is not None else train, verbose=0, return_dict=True,
                    callbacks=[steps])
    pred = m.predict(predict_ds if predict_ds is not None else train, verbose=0)
    return {"loss": [float(v) for v in hist.history["loss"]],
            "val_loss": [float(v) for v in hist.history.get("val_loss", [])],
            "train_steps": steps.train, "test_steps": steps.test,
            "evaluate": {k: float(v) for k, v in ev.items()},
            "predict_shape": list(np.asarray(pred).shape),
            "predict_finite": bool(np.isfinite(np.asarray(pred, np.float32)).all())}


def scenario(name, fn):
    if ONLY is not None and name not in ONLY:
        return
    try:
        out[name] = fn()
    except Exception as e:  # pylint: disable=broad-except
        out[name] = {"error": f"{type(e).__name__}: {e}"[:600],
                     "trace": traceback.format_exc()[-1500:]}
    print(f"SCENARIO {name} " + json.dumps(out[name]), flush=True)


kw = dict(image_size=(SIDE, SIDE), batch_size=BATCH, seed=1)
good = os.path.join(ROOT, "good")

scenario("int", lambda: run(model(3, "softmax", "sparse_categorical_crossentropy"),
                            pipeline.from_directory(good, label_mode="int", **kw)))
scenario("categorical", lambda: run(model(3, "softmax", "categorical_crossentropy"),
                                    pipeline.from_directory(good, label_mode="categorical", **kw)))
scenario("binary", lambda: run(model(1, "sigmoid", "binary_crossentropy"),
                               pipeline.from_directory(good, label_mode="binary",
                                                       class_names=["cat", "dog"], **kw)))
scenario("multi_hot", lambda: run(model(3, "sigmoid", "binary_crossentropy"),
                                  pipeline.from_manifest(os.path.join(ROOT, "multi.csv"),
                                                         label_columns=["labels"],
                                                         label_mode="multi_hot", **kw)))


def skip():
    bad_dir = os.path.join(ROOT, "with_bad")
    train = pipeline.from_directory(bad_dir, on_error="skip", **kw)
    unlabeled = pipeline.from_directory(bad_dir, labels=None, on_error="skip", shuffle=False,
                                        **kw)
    r = run(model(3, "softmax", "sparse_categorical_crossentropy"), train, predict_ds=unlabeled)
    r["skipped"] = sorted(os.path.basename(e.path) for e in pipeline.errors(unlabeled))
    return r


scenario("skip", skip)
scenario("augment", lambda: run(
    model(3, "softmax", "sparse_categorical_crossentropy"),
    pipeline.from_directory(good, augment=pipeline.Augment(horizontal_flip=True, rotation=10),
                            **kw)))


def split():
    train, val = pipeline.from_directory(good, validation_split=0.25, subset="both", **kw)
    return run(model(3, "softmax", "sparse_categorical_crossentropy"), train, val)


scenario("split", split)


def jax_loop():
    import jax  # pylint: disable=import-outside-toplevel
    import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
    ds = pipeline.from_directory(good, label_mode="int", dtype=tf.float32, **kw)
    w = jnp.zeros((SIDE * SIDE * 3, 3))

    def loss_fn(w, x, y):
        logits = x.reshape(x.shape[0], -1) @ w
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(y.shape[0]), y])

    step = jax.jit(lambda w, x, y: (lambda l, g: (w - 0.1 * g, l))(
        *jax.value_and_grad(loss_fn)(w, x, y)))
    losses, rows = [], 0
    for x, y in ds.as_numpy_iterator():
        w, loss = step(w, jnp.asarray(x), jnp.asarray(y))
        losses.append(float(loss))
        rows += x.shape[0]
    return {"losses": losses, "rows": rows, "x_dtype": str(x.dtype)}


if out["backend"] == "jax":
    scenario("jax_loop", jax_loop)

# what else works: each checked here, reported as it happens
scenario("bfloat16", lambda: run(model(3, "softmax", "sparse_categorical_crossentropy"),
                                 pipeline.from_directory(good, dtype=tf.bfloat16, **kw)))
scenario("include_paths", lambda: run(model(3, "softmax", "sparse_categorical_crossentropy"),
                                      pipeline.from_directory(good, include_paths=True, **kw)))
scenario("prefetch_to_device", lambda: run(
    model(3, "softmax", "sparse_categorical_crossentropy"),
    pipeline.from_directory(good, prefetch_to_device="/gpu:0", **kw)))


def service():
    # pylint: disable-next=import-outside-toplevel
    from tensorflow.data.experimental import service as svc
    dispatcher = svc.DispatchServer()
    worker = svc.WorkerServer(svc.WorkerConfig(
        dispatcher_address=dispatcher.target.split("://")[1]))
    ds = pipeline.from_directory(good, service=dispatcher.target, **kw)
    r = run(model(3, "softmax", "sparse_categorical_crossentropy"), ds)
    del worker
    return r


scenario("service", service)
print("RESULT " + json.dumps(out))
sys.stdout.flush()
os._exit(0)  # pylint: disable=protected-access
