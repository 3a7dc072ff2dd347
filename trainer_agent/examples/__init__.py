"""Runnable examples: a TorchRec DLRM under torchrun, and a launcher that plays the scheduler."""
