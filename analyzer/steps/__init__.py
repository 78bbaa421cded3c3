"""Steps and what happens in them: the step windows, per-op statistics, representative occurrences, transfers."""
