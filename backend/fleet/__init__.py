"""Fleet analytics: day rollups of attributed GPU-time, lost GPU-hours, regressions, failures."""
