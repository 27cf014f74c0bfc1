"""Tests of benchmark_illusion.models."""
