"""Tests for the compare domain."""
