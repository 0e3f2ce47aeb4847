"""Model registry: best DT and best overall model (by validation CV MAPE) under stable names, alias champion."""
