"""Tests of the symbolic shape layer."""
