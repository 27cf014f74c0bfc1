"""Tests of benchmark_illusion.scheduling."""
