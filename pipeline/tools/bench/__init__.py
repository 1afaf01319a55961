"""The benchmark harness and its candidates; the library never imports this package.

``pipeline.tools.bench.harness`` runs each candidate in its own subprocess and
reports throughput, images per CPU-second, time to first batch and peak memory
(``python -m pipeline bench`` and ``benchmarks/*.py`` call it);
``pipeline.tools.bench.bench`` is the ``bench`` command as a function (its checks, its
reports); ``pipeline.tools.bench.candidates`` registers the candidates built on public
APIs (pipeline, Keras, plain tf.data, ...). The optional peers (torch, DALI, ...)
are in ``benchmarks/peer_candidates.py``, and what only the scripts of ``benchmarks/``
use (their shared flags, their charts) in ``benchmarks/common_flags.py`` and
``benchmarks/charts.py``, out of the wheel.
"""
