"""Host dispatch: the GPU runs kernels asynchronously behind the CPU that issues them.

The host issues kernel i at h_i (the sum of the host costs of kernels 1..i) and the GPU starts it
at max(h_i, end_{i-1}): end_i = max(h_i, end_{i-1}) + t_i. Unrolled,
end_n = C_n + max_{i<=n}(h_i - C_{i-1}), with C the prefix sums of the kernel times. When
kernels are shorter than their host cost (batch-1 decode in eager PyTorch) the GPU waits on the
host, and the step takes ~n·d however few bytes it moves.

`Timed` keeps that sum in closed form for a run of kernels: G = ΣT, H = Σh, and the run's own
slack S = max_i(h_i - C_{i-1}), so end = G + S. Two runs back to back, or a run repeated n times,
combine without looking at their kernels again (`then`, `times`): the step engine costs one layer
and gets an 80-layer model, 256 micro-batches deep, exactly as if it had simulated every kernel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import numpy as np


class Timed(NamedTuple):
    """A run of kernels: GPU time `gpu` (s), host time `host` (s), slack (s), kernel count. A
    tuple: the step engine combines millions of them in a plan search."""

    gpu: float = 0.0
    host: float = 0.0
    slack: float = -math.inf  # -inf: no kernel yet
    kernels: int = 0

    @property
    def end(self) -> float:
        """When the last kernel ends, the run issued from an idle host and GPU at time 0."""
        return self[0] + self[2] if self[2] > -math.inf else 0.0

    def then(self, other: Timed) -> Timed:
        """This run, then `other`."""
        gpu, host, slack, kernels = self
        later = host - gpu + other[2]
        slack = slack if slack >= later else later
        return _new(Timed, (gpu + other[0], host + other[1], slack, kernels + other[3]))

    def times(self, n: int) -> Timed:
        """This run n times back to back: the largest slack term is in the first repeat when the
        GPU outpaces the host per repeat, in the last when it does not."""
        if n <= 0:
            return _EMPTY
        if n == 1:
            return self
        gpu, host, slack, kernels = self
        slack = slack + max(0.0, (n - 1) * (host - gpu))
        return _new(Timed, (n * gpu, n * host, slack, n * kernels))

    @staticmethod
    def of(times_s: Sequence[float], host_s: Sequence[float]) -> Timed:
        """A run from each kernel's GPU time and host cost (plain floats: no numpy on the
        predict path; the running sums add in the order np.cumsum does)."""
        if len(times_s) == 0:
            return _EMPTY
        gpu = issue = 0.0
        slack = -math.inf
        for i, (t, h) in enumerate(zip(times_s, host_s, strict=True)):
            issue = h if i == 0 else issue + h
            slack = max(slack, issue - gpu)  # issued at `issue`, the GPU free at `gpu`
            gpu = t if i == 0 else gpu + t
        return _new(Timed, (float(gpu), float(issue), float(slack), len(times_s)))

    @staticmethod
    def wait(seconds: float) -> Timed:
        """The GPU stream waits `seconds` (exposed communication), no host work."""
        if seconds <= 0:
            return _EMPTY
        return _new(Timed, (seconds, 0.0, 0.0, 0))


_new = tuple.__new__
_EMPTY = Timed()


def simulate_dispatch(times_s: np.ndarray, dispatch_s: float | np.ndarray) -> np.ndarray:
    """End time (s) of each kernel when the host issues kernel i at the sum of the host costs of
    kernels 1..i (dispatch_s each, or one cost per kernel) and the GPU runs them in order."""
    import numpy as np

    times_s = np.asarray(times_s, dtype=float)
    if times_s.size == 0:
        return times_s
    csum = np.cumsum(times_s)
    if np.ndim(dispatch_s):
        issue = np.cumsum(dispatch_s)
    else:
        issue = dispatch_s * np.arange(1, times_s.size + 1)
    slack = issue - np.concatenate(([0.0], csum[:-1]))
    return csum + np.maximum.accumulate(slack)
