"""Tests for the owners domain."""
