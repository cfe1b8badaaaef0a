"""Cited data and tiny pure predicates that every stage may read.

One place for each piece of knowledge: NVTX names the annotation writes (:mod:`.names`),
Tensor Core kernel-name rules (:mod:`.tensor_cores`), Tensor Core eligible module types and
FP32 GEMM names (:mod:`.gemm`), communication kernels (:mod:`.comm`), CUDA launch and
synchronizing API calls (:mod:`.apis`), step range names (:mod:`.steps`), iteration sources
and thresholds (:mod:`.iterations`) and accepted input files (:mod:`.inputs`).

Nothing here imports a stage, pandas, numpy or torch: the annotate stage (which runs inside
the profiled process and must stay light) reads these modules too (tests/test_rules.py,
tests/test_stages.py).
"""
