"""Models (workloads) as the REST API lists them: current ETT%, trend, owner, GPU-hours lost."""
