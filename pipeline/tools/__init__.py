"""Tools on top of the pipeline: they build datasets through the same builder.

- ``report``: ``scan``, one parallel pass that reports what a dataset holds.
- ``profiling``: ``profile``, per-stage cost and the bottleneck.
- ``capacity``: cores and tf.data service workers needed for N images/s.
- ``visualize``: ``show_batch``.
- ``sample``: the built-in sample that ``bench`` runs on.
- ``apidoc``: writes docs/api.md from the docstrings.
- ``bench``: ``python -m pipeline bench`` and the harness it needs."""
