"""Measuring real kernels and collectives with PyTorch (imported lazily: torch is optional)."""
