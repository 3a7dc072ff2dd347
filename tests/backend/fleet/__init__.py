"""Tests for the fleet domain."""
