"""Serving: an MLflow pyfunc that takes a GPU name + CNN features and answers latency in ms."""
