"""Paired comparison of a baseline and an optimized job, with cascade attribution."""
