"""The critical path of each step and what-if replay (docs/critical-path.md)."""
