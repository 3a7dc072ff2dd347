"""Tests for the advice domain."""
