"""Workload sources: trace readers, synthetic generators and benchmark-client recipes."""
