"""ETT planner: expected ETT% per model, what-ifs and the fleet ranking (issue 17)."""
