"""Tests of benchmark_illusion.metrics."""
