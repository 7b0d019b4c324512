"""The step engine: one GPU or a parallel plan, one way (ARCHITECTURE.md)."""
