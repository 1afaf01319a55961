"""Decode: bytes -> uint8 pixels, in graph. Sniff the format, guard against bombs and
cut files, decode, set channels, apply the EXIF orientation.

- ``image``: the decode map (sniff -> guard -> decode -> channels -> orientation).
- ``formats``: the one table of signatures, extensions and names.
- ``guard``: which file failed and why; the record of skipped files (``pipeline.errors``).
- ``jpegscan``: whether a JPEG's entropy-coded data is all there.
- ``bmp``: BMP in graph ops.
- ``masks``: segmentation masks to class indices."""
