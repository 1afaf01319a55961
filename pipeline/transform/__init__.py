"""Transform: the geometry of an image and its random augmentation, in graph.

- ``geometry``: deterministic resize, crop and pad of uint8 images.
- ``augment``: ``Augment``, seeded stateless random ops.
- ``quality``: PSNR against a reference resize."""
