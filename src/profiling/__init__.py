"""Our own GPU profiler: latency/throughput rows in the measurement schema, and Nsight Compute counters.

`python -m src.profiling run|ncu|parse-ncu|models` (docs/profiling.md). The ingest checks own files against
`src.profiling.schema.OWN_COLUMNS` and reads them with `src.profiling.schema.read_own_csv`.
"""
