"""Stage 2, launch: find nsys, run a program under ``nsys profile``, export the SQLite.

- :func:`profile_program` runs ``nsys profile`` around the annotation bootstrap and returns a
  :class:`ProfileRun` (the ``.sqlite``, the ``.nsys-rep``, the program's exit code, warnings);
- :func:`export_sqlite` exports an ``.nsys-rep``/``.qdrep``/``.qdstrm`` to SQLite;
- :func:`find_nsys` finds nsys and its version, or raises a clean :class:`NsysError`.

``torchrun`` and ``python -m torch.distributed.run|launch`` start each worker through the
bootstrap (:mod:`.launchers`); the program writes to the user's terminal itself while nsys's
own messages are held back (:mod:`.supervise`).
"""

from __future__ import annotations

from dlprof_lite.launch.nsys import Nsys, export_sqlite, find_nsys
from dlprof_lite.launch.run import ProfileRun, profile_program

__all__ = ["Nsys", "ProfileRun", "export_sqlite", "find_nsys", "profile_program"]
