"""Ingest: the four public benchmark sources (and our own profiler's rows) into one validated table."""
