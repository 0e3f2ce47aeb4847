"""Design-space exploration: rank GPUs for a CNN from a registered latency model, with conformal intervals."""
