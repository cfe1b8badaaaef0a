"""Collectives matched across ranks: how long each rank waited and how long the data moved.

Place in the pipeline: report. The annotation records each call of a wrapped
``torch.distributed`` collective as a ``collective`` fact and a ``coll:<op>`` range
(annotate/collectives.py); :mod:`.calls` pairs them per process, :mod:`.instances` matches
the calls of every rank into instances and derives the figures (DESIGN.md, Collectives):

* an **instance** is the same sequence number in the same group on every rank;
* its **transfer** is the shortest duration among the ranks (the rank that arrived last
  waited for nobody: its time is the data's);
* each rank's **wait** is its duration minus the transfer; the **last to arrive** (the latest
  start) is the rank the others waited for;
* ``algbw`` = bytes / transfer and ``busbw`` = algbw x nccl-tests' factor (rules/collectives.py).
"""
