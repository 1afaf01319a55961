"""Sources: what to read. Folders, path lists, manifests, ``.npy`` shards and Python
generators become an index of paths and labels; bytes are read from local files and URIs.

- ``factories``: ``from_directory``, ``from_paths``, ``from_manifest``, ``from_tfrecords``.
- ``index``: class folders and path lists -> ``Index`` (paths, labels, class names).
- ``manifest``: CSV and JSON Lines manifests -> ``Index``.
- ``read``: bytes, listings and sizes of local files and URIs (gfile, fsspec).
- ``pairs``: segmentation images matched to their masks by name.
- ``npy``: ``from_npy_shards``, rows of ``.npy`` files as fixed-length records.
- ``generator``: ``from_generator``, any Python generator (the slow, compatible path)."""
