"""Tests of benchmark_illusion.compression."""
