"""gpuperf: predict, explain and measure how fast Transformer workloads run on GPUs."""

__version__ = "0.1.0"
