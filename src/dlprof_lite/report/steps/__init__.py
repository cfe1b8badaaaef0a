"""The steps: the iterations table and the step breakdown (:mod:`.table`), their statistics
(:mod:`.stats`), the window of steps the other tables cover (:mod:`.window`) and the
projected epoch and training time (:mod:`.projection`)."""
