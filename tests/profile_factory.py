"""Moved to :mod:`builders`; this alias goes once every test imports from there."""

from builders import PID, R, build_gpus, build_marks, fact_mark, make_profile, training_profile

__all__ = ["PID", "R", "build_gpus", "build_marks", "fact_mark", "make_profile", "training_profile"]
