"""Tests of benchmark_illusion.data."""
