"""Deliver: the order of elements and stages, and how they reach the model.

- ``plan``: the order of the stages and of the elements, for every source.
- ``resume``: iterator checkpoints, mid-epoch.
- ``balance``: class weights and balanced sampling.
- ``distribute``: ``tf.distribute`` input sharding and the tf.data service.
- ``service_args``: the tf.data service servers' arguments, checked without TensorFlow.
- ``cachelock``: recovery of a file cache whose writer was stopped."""
