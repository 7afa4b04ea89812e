"""Train the Pareto front of a search: full training, pruning, QAT, export and the report."""
