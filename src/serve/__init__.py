"""Serving: `mlflow models serve` answers HTTP with the registered pyfunc.

The pyfunc itself (request validation, GPU-spec join, the sklearn Pipeline) is defined in
`src.features.served`, below training in the flow, because training logs it; this package is the top of the
flow where serving concerns (server settings, load tests) live.
"""
