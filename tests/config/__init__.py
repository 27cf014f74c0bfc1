"""Tests of benchmark_illusion.config."""
