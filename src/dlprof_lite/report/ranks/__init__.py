"""The ranks: communication against compute per (process, GPU) and the straggler
(:mod:`.table`), and the advice on exposed communication and a late rank (:mod:`.advice`)."""
