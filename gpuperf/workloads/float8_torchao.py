"""torchao's float8 training under torch.compile: the scaling work around each fp8 matmul.

torchtitan trains in float8 through torchao (`convert_to_float8_training`): every nn.Linear of
the decoder layers becomes a Float8Linear with dynamic scaling, which casts each operand of each
matmul to fp8 itself, from a scale it computes from the operand's absolute maximum that very
step. Unlike Transformer Engine's casts folded into the kernels before them (gpuperf's fused
fp8 training: one quantization per GEMM input), each cast here needs its operand's amax
first, a reduction over the whole tensor before any element can be scaled, so Inductor runs a
reduction pass and then a cast pass (both fused with the kernels that produce or reread the
operand, but passes over it each), per Linear (q, k and v each cast the same input):

- forward: the input's amax and cast (x to fp8, m·k), the weight's amax and cast (k·n);
- backward: the output gradient's amax and cast, written twice (row-major for the input
  gradient, transposed for the weight gradient: `_scaled_mm` takes its second operand
  column-major), the input cast again transposed for the weight gradient, the weight cast again
  transposed for the input gradient (their scales are the forward's).

Measured on an H100 (benchmarks/device/compile_train_probe.py, e2e_compile_train.json): with
them the compiled float8 step's kernels beyond its GEMMs are what the profile shows to within a
few ms; without them fp8 training was charged one cast per GEMM input and none in the backward.
Rowwise scaling (fp8_scales=row) takes the same passes (one amax per row and per column).
"""

from __future__ import annotations

from gpuperf.dtypes import DType
from gpuperf.perfmodel.ops import Elementwise, Gemm, Op, Reduce


def _amax(name: str, rows: int, cols: int, act: DType) -> Reduce:
    """One pass reading the operand for its absolute maximum."""
    return Reduce(name, "amax", rows, cols, 1, act)


def _cast(name: str, numel: int, act: DType, fp8: DType, n_out: int = 1) -> Elementwise:
    """One pass reading the 16-bit operand, writing its fp8 copy (or copies)."""
    return Elementwise(name, "quant", numel, 1, n_out, act, fp8, 2.0)


def forward_scaling(linears: list[Gemm], act: DType) -> list[Op]:
    """Each Linear's input and weight scaled and cast, before its forward matmul."""
    ops: list[Op] = []
    for g in linears:
        ops += [_amax(f"{g.name}.x_amax", g.m, g.k, act),
                _cast(f"{g.name}.x_cast", g.m * g.k, act, g.dtype),
                _amax(f"{g.name}.w_amax", g.k, g.n, act),
                _cast(f"{g.name}.w_cast", g.k * g.n, act, g.dtype)]  # fmt: skip
    return ops


def backward_scaling(linears: list[Gemm], act: DType) -> list[Op]:
    """Each Linear's output gradient scaled and cast (both layouts), its input and weight cast
    again transposed, in the backward's order (the last Linear first)."""
    ops: list[Op] = []
    for g in reversed(linears):
        ops += [_amax(f"{g.name}.dy_amax", g.m, g.n, act),
                _cast(f"{g.name}.dy_cast", g.m * g.n, act, g.dtype, n_out=2),
                _cast(f"{g.name}.xt_cast", g.m * g.k, act, g.dtype),
                _cast(f"{g.name}.wt_cast", g.k * g.n, act, g.dtype)]  # fmt: skip
    return ops
