"""Stage 3, ingest: read an nsys SQLite export into one enriched :class:`Profile`.

Reading ends here and aggregation begins in :mod:`dlprof_lite.report`. :mod:`.load` runs the
steps in order: read (:mod:`.reader`), nest NVTX ranges (:mod:`.nvtx`), correlate ops with
their launch calls and ranges (:mod:`.correlate`), then label every kernel and memop with
Tensor Core use (:mod:`.tensorcore`), launch overhead (:mod:`.overhead`), layer, direction
and phase (:mod:`.layers`) and iteration (:mod:`.iterations`), and every range with its
module direction and the GPU work launched inside it (:mod:`.range_columns`; its chain ids
come with the nesting, :mod:`.paths`). Classification data is in :mod:`dlprof_lite.rules`.
"""
