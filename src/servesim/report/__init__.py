"""Presenting a prediction: console summary, JSON and Parquet files."""
