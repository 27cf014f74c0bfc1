"""Tests of benchmark_illusion.evaluation."""
