"""``python -m dlprof_lite`` is the ``dlprof-lite`` command."""

from dlprof_lite.cli import main

raise SystemExit(main())
