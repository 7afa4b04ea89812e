"""Search: the Optuna study (samplers, storage, budgets as constraints), the evaluators and the results."""
