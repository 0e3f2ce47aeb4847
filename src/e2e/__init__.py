"""End-to-end time model: per (CNN, GPU, mode, software context) time(batch, iters) = iters * (a + b * batch)."""
