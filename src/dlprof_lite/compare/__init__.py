"""Comparisons of runs with statistics (stage after store)."""
