"""Scheduling: job sizes for a cluster and a run's cost estimate."""
