"""Saving and restoring a learner: atomic checkpoints, RNG state, torch modules as numpy tensors."""
