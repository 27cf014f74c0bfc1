"""Tests of benchmark_illusion.concepts."""
