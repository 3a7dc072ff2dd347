"""Annotations: dated notes (a rollout, a config change) drawn on every trend chart they concern."""
