"""The layers table: one row per module (:mod:`.table`), what each ran (:mod:`.kernels`),
the modules folded into their parents (:mod:`.folded`) and DDP's gradient buckets
(:mod:`.buckets`)."""
