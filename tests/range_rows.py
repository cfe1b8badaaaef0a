"""Moved to :mod:`builders`; this alias goes once every test imports from there."""

from builders import ranges

__all__ = ["ranges"]
