"""The straggler rule: which rank the others wait for (dlprof-lite choice).

In synchronous data-parallel training (DDP, Horovod, FSDP) every rank joins the same
collectives each step, so a rank that spends longer before a collective (more compute, or
more time loading its batch) makes every other rank wait inside that collective: on the GPU
the others' communication kernels run long and are not overlapped by their compute (exposed
communication); on the CPU (gloo) they block in the call. HTA's cross-rank view names the
same symptom ("communication blocked on the slowest rank").

Where the annotation recorded the collectives (annotate/collectives.py), the waits are
measured, not inferred: the straggler is the rank the other ranks waited for most per step
(the mean over them of their wait in the instances it arrived last at, report/collectives/),
when that is at least :data:`STRAGGLER_MIN_EXCESS` of the median per-rank step time.

Otherwise (report/ranks/table.py applies it, with >= 2 ranks):

1. each rank's *work* per step is its compute (non-communication kernel time) plus its data
   phase host time; its *excess* is its work minus the median of the other ranks' (with two
   ranks, the other one's: the median of all would halve the difference);
2. the candidate is the rank with the largest excess; it must be at least
   :data:`STRAGGLER_MIN_EXCESS` of the median per-rank step time (smaller differences are
   within step-to-step noise: half the steady-iteration tolerance of rules/iterations.py);
3. where communication kernels were recorded, the other ranks' mean exposed communication
   per step must be at least :data:`STRAGGLER_WAIT_SHARE` of that excess: the others do wait
   for it. Half, not all: a collective also overlaps the straggler's own tail, and NCCL
   kernels start before their peers arrive, so part of the wait hides in overlapped time.
   Without communication kernels (a CPU run on gloo) the wait is not measured and the
   straggler is named from its excess alone, with a warning.
"""

from __future__ import annotations

# Fraction of the median per-rank step time a rank's extra work must reach (dlprof-lite
# choice: 5 %, half of rules.iterations.STEADY_TOLERANCE).
STRAGGLER_MIN_EXCESS = 0.05
# Fraction of the straggler's extra work the others' exposed communication must reach.
STRAGGLER_WAIT_SHARE = 0.5
