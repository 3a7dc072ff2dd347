"""Tests for the workloads domain."""
