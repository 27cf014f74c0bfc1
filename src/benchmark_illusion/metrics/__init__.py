"""Metrics: the results database, bootstrap intervals, comparisons and figures."""
