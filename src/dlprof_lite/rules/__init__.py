"""Cited data and tiny pure predicates that every stage may read.

One place for each piece of knowledge: NVTX names (:mod:`.names`), Tensor Core kernel-name
rules (:mod:`.tensor_cores`), Tensor Core eligible module types and FP32 GEMM names
(:mod:`.gemm`), communication kernels (:mod:`.comm`), accepted input files (:mod:`.inputs`)
and the iteration statistics' thresholds (:mod:`.iterations`).

Nothing here imports a stage, pandas, numpy or torch: the annotate stage (which runs inside
the profiled process and must stay light) reads these modules too.
"""
