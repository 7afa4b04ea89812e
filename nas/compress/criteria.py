"""The channel-importance criteria pruning knows (``prune.criterion``), named without loading torch."""

__all__ = ["CRITERIA"]

CRITERIA = ("l1", "bn", "taylor", "loss")  # channel importance for pruning (prune.criterion)
