"""The change stream's parts beside its run (tideline.stream.run reads the batches): `commit`
applies one decoded batch to the target atomically with its offsets; `watch` is the failure
handling that runs beside it (fence, capture, partition tree)."""
