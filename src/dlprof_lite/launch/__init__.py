"""Stage 2, launch: find nsys, run a program under ``nsys profile``, export the SQLite."""
