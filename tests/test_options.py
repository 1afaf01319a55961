"""Bad arguments get a ValueError naming the argument and the value received."""

import os

import numpy as np
import pytest

import pipeline
from conftest import solid


@pytest.fixture
def tree(tmp_path):
    for c in ("x", "y"):
        for i in range(2):
            solid(str(tmp_path / "d" / c / f"{i}.png"), i)
    return str(tmp_path / "d")


@pytest.mark.parametrize("kw, needle", [
    (dict(image_size=(0, 224)), "image_size=(0, 224)"),
    (dict(image_size=(-5, 5)), "image_size=(-5, 5)"),
    (dict(image_size="big"), "image_size='big'"),
    (dict(channels=2), "channels=2"),
    (dict(subset="training"), "subset='training'"),
    (dict(validation_split=0.2), "subset=None"),
    (dict(validation_split=1.5, subset="training"), "validation_split=1.5"),
    (dict(batch_size=0), "batch_size=0"),
    (dict(label_mode="sparse"), "label_mode='sparse'"),
    (dict(resize="zoom"), "resize='zoom'"),
    (dict(interpolation="cubic"), "interpolation='cubic'"),
    (dict(on_error="ignore"), "on_error='ignore'"),
    (dict(dtype="int8"), "dtype='int8'"),
    (dict(image_size=None, batch_size=8), "batch_size=8"),
    (dict(max_errors=3), "on_error='raise'"),
    (dict(on_error="skip", max_errors=-1), "max_errors=-1"),
    (dict(max_pixels=0), "max_pixels=0"),
    (dict(augment="flip"), "augment='flip'"),
    (dict(seed="1"), "seed='1'"),
    # found by a first user (fresh-eyes test): each was a TypeError / accepted before
    (dict(labels=5), "labels=5"),
    (dict(channels=3.0), "channels=3.0"),
    (dict(input_context="ctx"), "input_context='ctx'"),
    (dict(service=5), "service=5"),
    (dict(normalize="bogus", dtype="float32"), "normalize='bogus'"),
    (dict(shuffle="yes"), "shuffle='yes'"),
    (dict(exif_orientation=2), "exif_orientation=2"),
    (dict(fast_jpeg="no"), "fast_jpeg='no'"),
    (dict(follow_links="yes"), "follow_links='yes'"),
    (dict(autotune="x"), "autotune='x'"),
    (dict(cache=""), "cache=''"),
    (dict(processing_mode="dynamic"), "processing_mode='dynamic', service=None"),
    (dict(seed=np.int64(-3)), "seed=-3"),
    (dict(max_errors=float("nan"), on_error="skip"), "max_errors=nan"),
    (dict(validation_split=np.float32(1.5), subset="training"), "validation_split=1.5"),
    (dict(seed=-1), "seed=-1"),
    (dict(image_size=(10 ** 6, 10 ** 6)), "image_size=(1000000, 1000000)"),
    (dict(label_mode="multi_hot"), "label_mode='multi_hot'"),
])
def test_bad_option_names_argument_and_value(tree, kw, needle):
    with pytest.raises(ValueError) as e:
        pipeline.from_directory(tree, **kw)
    assert needle in str(e.value)


def test_unknown_option_is_a_type_error(tree):
    with pytest.raises(TypeError, match="imagesize"):
        pipeline.from_directory(tree, imagesize=(2, 2))


def test_an_unknown_keyword_names_the_factory_and_the_closest_name(tree, tmp_path):
    """`from_directory(path, batchsize=32)` was a bare TypeError (issue #15); still a TypeError
    (Python's convention), naming the function, the keyword and the closest valid name,
    whether that is an image option, the factory's own argument or, with no **options,
    a plain parameter."""
    from pipeline import config
    cases = [
        (lambda: pipeline.from_directory(tree, batchsize=32),
         "from_directory() got an unexpected keyword argument 'batchsize' (did you mean "
         "'batch_size'?)"),
        (lambda: pipeline.from_directory(tree, class_name=["a"]),
         "from_directory() got an unexpected keyword argument 'class_name' (did you mean "
         "'class_names'?)"),
        (lambda: pipeline.from_paths([tree], imagesize=8, lables=[0]),
         "from_paths() got unexpected keyword arguments 'imagesize' (did you mean "
         "'image_size'?), 'lables' (did you mean 'labels'?)"),
        (lambda: pipeline.from_manifest("m.csv", label_column="y"),
         "from_manifest() got an unexpected keyword argument 'label_column' (did you mean "
         "'label_columns'?)"),
        (lambda: pipeline.from_tfrecords(str(tmp_path), suffle=False),
         "from_tfrecords() got an unexpected keyword argument 'suffle' (did you mean "
         "'shuffle'?)"),
        (lambda: pipeline.from_npy_shards("x_*.npy", batchsize=4),
         "from_npy_shards() got an unexpected keyword argument 'batchsize' (did you mean "
         "'batch_size'?)"),
        (lambda: pipeline.from_generator(lambda: iter([]), None, num_paralel=2),
         "from_generator() got an unexpected keyword argument 'num_paralel' (did you mean "
         "'num_parallel'?)"),
        (lambda: pipeline.write_tfrecords(tree, str(tmp_path / "o"), num_shard=2),
         "write_tfrecords() got an unexpected keyword argument 'num_shard' (did you mean "
         "'num_shards'?)"),
        (lambda: pipeline.write_tfrecords(tree, str(tmp_path / "o"), path_colum="p"),
         "write_tfrecords() got an unexpected keyword argument 'path_colum' (did you mean "
         "'path_column'?)"),
        (lambda: pipeline.scan(tree, max_pixel=10),
         "scan() got an unexpected keyword argument 'max_pixel' (did you mean 'max_pixels'?)"),
        (lambda: pipeline.profile(tree, num_element=10),
         "profile() got an unexpected keyword argument 'num_element' (did you mean "
         "'num_elements'?)"),
        (lambda: pipeline.Augment(rotate=10),
         "Augment() got an unexpected keyword argument 'rotate' (did you mean 'rotation'?)"),
        (lambda: pipeline.from_directory(tree, color_mode="grayscale"),
         "from_directory() got an unexpected keyword argument 'color_mode' (`color_mode` is "
         "Keras' name: use channels=1 (grayscale), 3 (rgb) or 4 (rgba))"),
    ]
    for call, says in cases:
        with pytest.raises(TypeError) as e:
            call()
        assert str(e.value) == says
    # no close name: the valid ones are listed
    with pytest.raises(TypeError) as e:
        pipeline.from_npy_shards("x_*.npy", qqq=1)
    assert str(e.value) == (
        "from_npy_shards() got an unexpected keyword argument 'qqq'; its keyword arguments: "
        "batch_size, cycle_length, deterministic, drop_remainder, inputs, labels, "
        "num_parallel_calls, prefetch, seed, shuffle, shuffle_buffer_size")
    # make_options (the factories' one check of their options) says the same
    with pytest.raises(TypeError, match=r"^from_paths\(\) got an unexpected keyword argument "
                                        r"'batchsize' \(did you mean 'batch_size'\?\)$"):
        config.make_options("from_paths", batchsize=2)
    # the signatures the reference shows are the functions' own
    import inspect
    assert str(inspect.signature(pipeline.from_directory)) == (
        "(directory, labels='inferred', class_names=None, follow_links=False, masks_dir=None, "
        "mask_suffix: 'str' = '', image_suffix: 'str' = '', **options)")


def test_missing_directory_is_named(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(FileNotFoundError) as e:
        pipeline.from_directory(missing)
    assert missing in str(e.value)


def test_empty_directory(tmp_path):
    os.makedirs(tmp_path / "empty")
    with pytest.raises(ValueError) as e:
        pipeline.from_directory(str(tmp_path / "empty"))
    assert "empty" in str(e.value)


def test_no_class_folders_when_inferred(tmp_path):
    solid(str(tmp_path / "flat" / "a.png"), 1)
    with pytest.raises(ValueError, match="class sub-folders"):
        pipeline.from_directory(str(tmp_path / "flat"))
    # labels=None reads a flat folder
    ds = pipeline.from_directory(str(tmp_path / "flat"), labels=None, image_size=(4, 4))
    assert sum(int(x.shape[0]) for x in ds) == 1


def test_unknown_class_name_is_named(tree):
    with pytest.raises(ValueError) as e:
        pipeline.from_directory(tree, class_names=["x", "zebra"])
    assert "zebra" in str(e.value) and "class_names" in str(e.value)


def test_binary_needs_two_classes(tmp_path):
    for c in ("p", "q", "r"):
        solid(str(tmp_path / "t" / c / "0.png"), 1)
    with pytest.raises(ValueError, match="exactly 2 classes"):
        pipeline.from_directory(str(tmp_path / "t"), label_mode="binary")


def test_labels_length_must_match(tree):
    with pytest.raises(ValueError, match="labels"):
        pipeline.from_directory(tree, labels=[0, 1])
    with pytest.raises(ValueError, match="paths"):
        pipeline.from_paths("one/path.jpg")


def test_found_by_the_fresh_eyes_user(tmp_path):
    """Bad arguments name the argument; Keras' names point to ours; options that need
    another one are refused; file_paths is this pipeline's share."""
    import tensorflow as tf
    from PIL import Image
    root = tmp_path / "d" / "a"
    root.mkdir(parents=True)
    for k in range(4):
        Image.new("RGB", (4, 4), (k, 0, 0)).save(root / f"{k}.png")
    for bad in (None, 123):
        with pytest.raises(ValueError, match=r"`directory` must be .*Received: directory="):
            pipeline.from_directory(bad)
    with pytest.raises(ValueError, match=r"Received: paths\[1\]=None"):
        pipeline.from_paths([str(root / "0.png"), None])
    with pytest.raises(TypeError, match=r"`color_mode` is Keras' name: use channels=1"):
        pipeline.from_directory(str(tmp_path / "d"), color_mode="grayscale")
    with pytest.raises(TypeError, match=r"`crop_to_aspect_ratio` is Keras' name: use resize='crop'"):
        pipeline.from_directory(str(tmp_path / "d"), crop_to_aspect_ratio=True)
    with pytest.raises(ValueError, match=r"`job_name` names a tf.data service job"):
        pipeline.from_directory(str(tmp_path / "d"), job_name="x")
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1,
                                     num_replicas_in_sync=2)
    with pytest.raises(ValueError, match=r"divisible by the 2 replicas.*Received: batch_size=3"):
        pipeline.from_directory(str(tmp_path / "d"), batch_size=3, input_context=ctx)
    ds = pipeline.from_directory(str(tmp_path / "d"), batch_size=2, input_context=ctx,
                                 image_size=(4, 4), shuffle=False)
    assert ds.file_paths == [str(root / "1.png"), str(root / "3.png")]
    assert sorted(int(x[0, 0, 0]) for x, _ in ds.unbatch()) == [1, 3]


def test_manifest_messages(tmp_path):
    from PIL import Image
    Image.new("RGB", (4, 4)).save(tmp_path / "x.png")
    cases = [("path,label\nx.png,0.5\n", "is a fractional number, not an integer class index"),
             ("path,label\nx.png\n", r"line 2: no value in column\(s\) 'label'"),
             ("path,label\nx.png,0,9\n", r"1 more field\(s\) than the header has")]
    for k, (text, msg) in enumerate(cases):
        m = tmp_path / f"m{k}.csv"
        m.write_text(text)
        with pytest.raises(ValueError, match=msg):
            pipeline.from_manifest(str(m), label_mode="int")
    j = tmp_path / "m.jsonl"
    j.write_text('{"path": 5, "label": 0}\n')
    with pytest.raises(ValueError, match=r"the path in column 'path' must be a string, got 5"):
        pipeline.from_manifest(str(j))


# --- issue 15: what a user meets with skip mode, include_paths and prefetch_to_device ----

def _fit_tree(root, n_per_class=5, bad=0):
    for c in ("x", "y"):
        for i in range(n_per_class):
            solid(os.path.join(root, c, f"{i}.jpg"), 40 * i + (c == "y") * 10, fmt="JPEG")
    for i in range(bad):
        with open(os.path.join(root, "x", f"bad{i}.jpg"), "wb") as f:
            f.write(b"\xff\xd8\xff\xe0 not really a jpeg")
    return root


def _tiny_model(num_classes):
    import keras
    m = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Rescaling(1 / 255.0),
                          keras.layers.GlobalAveragePooling2D(),
                          keras.layers.Dense(num_classes)])
    m.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def _batch_counter():
    """A Keras callback whose ``per_epoch`` lists the batches of each epoch."""
    import keras

    class Counter(keras.callbacks.Callback):
        per_epoch = []

        def on_epoch_begin(self, epoch, logs=None):
            self.per_epoch = self.per_epoch + [0]

        def on_train_batch_end(self, batch, logs=None):
            self.per_epoch[-1] += 1
    return Counter()


def test_skip_mode_length_is_unknown_and_fit_runs_every_epoch_as_documented(tmp_path):
    import tensorflow as tf
    root = _fit_tree(str(tmp_path / "d"), n_per_class=5, bad=1)   # 10 good, 1 bad
    ds = pipeline.from_directory(root, image_size=(8, 8), batch_size=4, on_error="skip",
                                 seed=0)
    assert int(ds.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    with pytest.raises(TypeError):
        len(ds)
    counter = _batch_counter()
    hist = _tiny_model(2).fit(ds, epochs=3, verbose=0, callbacks=[counter])
    assert len(hist.history["loss"]) == 3
    assert counter.per_epoch == [3, 3, 3]            # 10 good images in batches of 4, each epoch
    assert [r.path for r in pipeline.errors(ds)] == [os.path.join(root, "x", "bad0.jpg")]
    # raise mode (the default): the length is known
    good = _fit_tree(str(tmp_path / "g"), n_per_class=5)
    ds = pipeline.from_directory(good, image_size=(8, 8), batch_size=4)
    assert len(ds) == 3 and int(ds.cardinality()) == 3


def test_include_paths_recipe_for_fit(tmp_path):
    root = _fit_tree(str(tmp_path / "d"), n_per_class=4)
    ds = pipeline.from_directory(root, image_size=(8, 8), batch_size=4, include_paths=True,
                                 seed=0)
    assert len(ds.element_spec) == 3 and ds.element_spec[2].dtype.name == "string"
    model = _tiny_model(2)
    with pytest.raises(Exception):      # Keras reads the paths as sample_weight (documented)
        model.fit(ds, epochs=1, verbose=0)
    fit_ds = ds.map(lambda *el: el[:-1])               # the recipe in the docs
    assert len(fit_ds.element_spec) == 2
    hist = model.fit(fit_ds, epochs=2, verbose=0)
    assert len(hist.history["loss"]) == 2 and np.isfinite(hist.history["loss"]).all()
    doc = pipeline.ImageOptions.__doc__
    assert "ds.map(lambda *el: el[:-1])" in doc and "sample_weight" in doc


def test_prefetch_to_device_without_that_device_warns_once(tmp_path, caplog):
    import tensorflow as tf
    if tf.config.list_logical_devices("GPU"):
        pytest.skip("a GPU is present: /gpu:7 may exist")
    root = _fit_tree(str(tmp_path / "d"), n_per_class=2)
    caplog.set_level("WARNING")
    a = pipeline.from_directory(root, image_size=(8, 8), batch_size=2, prefetch_to_device="/gpu:7")
    b = pipeline.from_directory(root, image_size=(8, 8), batch_size=2, prefetch_to_device="/gpu:7")
    lines = [r.getMessage() for r in caplog.records if "prefetch_to_device" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "'/gpu:7' is ignored" in lines[0] and "no such device" in lines[0] and "CPU:0" in lines[0]
    x, _ = next(iter(a))
    assert x.shape == (2, 8, 8, 3) and "CPU" in x.device
    assert sum(int(x.shape[0]) for x, _ in b) == 4
    caplog.clear()   # a device that exists: no warning
    pipeline.from_directory(root, image_size=(8, 8), batch_size=2, prefetch_to_device="/cpu:0")
    assert not [r for r in caplog.records if "prefetch_to_device" in r.getMessage()]
