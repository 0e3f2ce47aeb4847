"""Training: estimators from config, Optuna tuning, evaluation protocols, MLflow logging (`python -m src.train`)."""
