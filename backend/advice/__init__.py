"""Advice: the checkpoint interval (Eq. 2) and the init critical path with fast-batch (Eq. 4)."""
