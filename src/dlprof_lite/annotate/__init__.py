"""Stage 1, annotate: NVTX ranges around modules, phases and iterations (no pandas here)."""
