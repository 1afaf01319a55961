"""Convert: images stored once as TFRecord shards, in one process or on Apache Beam.

- ``shards``: ``write_tfrecords`` and the reader of its shards.
- ``shard_writer``: the writing side shared by every writer.
- ``beam_write``: the conversion as an Apache Beam pipeline."""
