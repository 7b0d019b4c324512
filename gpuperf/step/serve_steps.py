"""The time of one continuous-batching step, from the step engine.

A step runs T tokens through the model: the decodes' one token each and the prefill chunks'
tokens, flattened (vLLM, TRT-LLM and Hugging Face's continuous batching all do). Every kernel but
two kinds depends on T alone, so the engine builds and costs the forward of T tokens (the same
builders, Coster, sustained clock, kernel floors and host dispatch as `gpuperf predict`); per step
only these are costed again:

- attention: the decodes as one batch of single-query sequences over their mean context, each
  prefill chunk as its own queries over its past plus itself;
- the lm_head, over one row per sequence that samples a token.

Decode-only steps that fit a captured CUDA graph (EngineProfile.graph_sizes) run the graph of the
padded batch: no launches on the host, the graph's gaps on the GPU; every kernel runs the padded
rows but attention, whose padding slots hold no cached tokens (the engines pad with empty or
one-token dummy sequences), over the real decodes' contexts. The host's own work per step
(EngineProfile: step_overhead, per_seq, per_kv_token, eager_step, in kernel dispatches of this
machine) comes before the kernels. Forwards of T tokens are costed at grid points (_grid) and
a step between two points is interpolated; attention contexts are rounded to 1/64 of an octave
(well under 2% of a kernel's time).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpuperf.step.dispatch import Timed

if TYPE_CHECKING:
    from gpuperf.hardware.spec import GpuSpec, SystemSpec
    from gpuperf.perfmodel.ops import Op
    from gpuperf.step.serve_engines import EngineProfile
    from gpuperf.workloads.config import ModelConfig
    from gpuperf.workloads.scenario import Scenario


# Kernels that can run inside a neighbour (their work is memory traffic the other kernel streams).
_FUSABLE = ("norm", "elementwise", "copy")
# Hugging Face's paged cache reads a sliding-window layer's keys and values another way
# (transformers 5.17 PagedAttentionCache.update, whatever the lengths): it gathers the cache,
# then puts the step's new tokens in with masked_scatter_ (mask = read_index == sentinel,
# broadcast over heads and head_dim), then writes the cache. PyTorch's masked_scatter_ on CUDA
# (aten/src/ATen/native/cuda IndexKernel.cpp/.cu) runs three kernels per tensor: the broadcast
# mask made contiguous (1 byte written a value, at the pace of its index arithmetic:
# membound.ISSUE_DEFAULTS["mask_copy"]), cub's prefix sum of it into int64 (1 byte read, 8
# written: ISSUE_DEFAULTS["scan"]) and one elementwise pass (mask, prefix and value read, value
# written: _SCATTER_BYTES plus two values' bytes). Profiled on an H100 (Phi-3-mini,
# serve_hf_profile_families2.json) the three take 2.5x the scatter pass's time, not the 1.8x
# that their bytes alone would. _WINDOW_CALLS: the Python calls that path adds per layer (the
# mask's comparison and two masked_scatter_), each a host dispatch in eager steps.
_SCATTER_BYTES = 9
_WINDOW_CALLS = 3


def window_scatter(op: Op, gathered: int, kv_heads: int) -> tuple[Op, Op, Op]:
    """The kernels of one masked_scatter_ of a sliding-window layer's step (K or V) into the
    `gathered` cached tokens of `op`'s attention, `kv_heads` of them: the mask made contiguous,
    its prefix sum, the scatter (module notes at _SCATTER_BYTES)."""
    from gpuperf.dtypes import BYTES
    from gpuperf.perfmodel.ops import Copy, Elementwise

    values = gathered * kv_heads * op.head_dim  # type: ignore[attr-defined]
    dtype = op.kv_dtype or op.dtype  # type: ignore[attr-defined]
    scatter = values * (_SCATTER_BYTES + 2 * BYTES[dtype]) // 2  # Copy reads and writes nbytes
    return (
        Elementwise("attn/window_mask", "mask_copy", values, n_in=0, dtype="int8"),  # bool
        Elementwise("attn/window_prefix_sum", "scan", values, dtype="int8", n_out=8),  # int64
        Copy("attn/window_scatter", scatter, dtype),
    )


def _grid(limit: int) -> list[int]:
    """Token counts the forward is costed at: every 16 to 256, every 64 to 2048, every 256 to
    16384, then every 1024."""
    pts, t = [], 1
    while True:
        pts.append(t)
        if t >= limit:
            return pts
        step = 16 if t < 256 else 64 if t < 2048 else 256 if t < 16384 else 1024
        t = step if t == 1 else t + step


def _round_ctx(n: int) -> int:
    """n rounded up to 1/64 of its octave (exact below 128)."""
    if n <= 128:
        return n
    q = 1 << (n.bit_length() - 7)
    return -(-n // q) * q


@dataclass(frozen=True, slots=True)
class _Seg:
    """A Part of the forward split at its per-step kernels: runs[i] before variable[i], the last
    run after them; each variable kernel with its host cost and what it is (attention / head)."""

    runs: tuple[Timed, ...]
    variable: tuple[tuple[Op, float, str], ...]
    repeat: int


class StepTimer:
    """Seconds of a step of a given make-up, for one model on one replica (tp GPUs)."""

    def __init__(self, cfg: ModelConfig, gpu: GpuSpec, system: SystemSpec | None,
                 engine: EngineProfile, base: Scenario) -> None:  # fmt: skip
        from gpuperf.step.plan import place

        self.cfg, self.gpu, self.system, self.engine = cfg, gpu, system, engine
        self.base = base
        self.where = place(cfg, base, gpu, system)
        self._layouts: dict[tuple[int, int], tuple[tuple[_Seg, ...], object]] = {}
        self._op_s: dict[tuple, float] = {}
        self._forwards: dict[tuple, Timed] = {}  # a step's forward by its make-up
        self.grid = _grid(max(engine.token_budget, 1))

    # ---------------------------------------------------------------- forwards, costed once
    def unfused(self) -> list[str]:
        """The engine's fused_kernels that name no kernel of this model's forward in any step it
        may run (a prefill and, where the engine captures them, a CUDA-graph decode), in its
        dtype or in fp8 (whose quantization kernels a profile names for every model)."""
        from gpuperf.errors import InputError
        from gpuperf.workloads.step_work import build

        names: set[str] = set()
        prefill = dict(mode="prefill", batch=1, micro_batch=None, seq=16, cuda_graphs=False)
        decode = dict(mode="decode", batch=1, micro_batch=None, ctx=16, cuda_graphs=True)
        for dtype in dict.fromkeys((self.base.dtype, "fp8")):
            for step in (prefill, decode) if self.engine.cuda_graphs else (prefill,):
                try:
                    sc = replace(self.base, dtype=dtype, **step)
                    parts = build(self.cfg, sc, self.where.groups).stages[0].fwd
                except InputError:  # fp8 beside weight-only int4, say: no such step
                    continue
                names.update(op.name for part in parts for op in part.ops)
        return [n for n in self.engine.fused_kernels if n not in names]

    def _layout(self, tokens: int, graph: int) -> tuple[tuple[_Seg, ...], object]:
        """The forward of `tokens` tokens split at its per-step kernels; graph > 0: a decode step
        of that many sequences replayed as a CUDA graph."""
        key = (tokens, graph)
        hit = self._layouts.get(key)
        if hit is not None:
            return hit
        from gpuperf.step.cost import moe_host
        from gpuperf.step.run import coster_for
        from gpuperf.workloads.step_work import build

        # micro_batch=None: the base's own micro-batch (set from its batch) must not carry over
        if graph:
            sc = replace(self.base, mode="decode", batch=graph, micro_batch=None, ctx=1024,
                         cuda_graphs=True)  # fmt: skip
        else:
            sc = replace(self.base, mode="prefill", batch=1, micro_batch=None, seq=tokens,
                         cuda_graphs=False)  # fmt: skip
        coster = coster_for(sc, self.where, moe_host(self.cfg))
        work = build(self.cfg, sc, self.where.groups)
        segs = []
        gap = coster.rules.graph_gap
        # A kernel inside a neighbouring one: its bytes streamed at the sustained rate, no
        # launch, floor or ramp of its own.
        stream = self.gpu.hbm_bw * self.gpu.params.mem_eff
        sliding = set(self.cfg.sliding_layers) if self.cfg.sliding_window else set()
        for part in work.stages[0].fwd:
            # a run of alike layers shares its kind: its first layer says whether it slides
            attn = "attn_window" if part.layer0 in sliding else "attn"
            c = coster.cost(part)
            keep = 1.0 - coster.overlap_cost
            eff = [t - h * keep for t, h in zip(c.tpl.time_s, c.tpl.hidden_s, strict=True)]
            host = list(c.tpl.host_s)
            for i in self._fused(part):
                eff[i], host[i] = c.tpl.rows[i][4] / stream, 0.0
            runs, variable, lo = [], [], 0
            for i, op in enumerate(part.ops):
                what = attn if op.kind == "attention" else (
                    "head" if op.kind == "gemm" and op.name == "lm_head" else "")  # fmt: skip
                if what:
                    runs.append(Timed.of(eff[lo:i], host[lo:i]))
                    variable.append((op, host[i] + 0.0, what))
                    lo = i + 1
            runs.append(Timed.of(eff[lo:], host[lo:]))
            segs.append(_Seg(tuple(runs), tuple(variable), part.repeat))
        out = (tuple(segs), (coster, gap))
        self._layouts[key] = out
        return out

    def _fused(self, part: Any) -> list[int]:
        """Indices of `part`'s kernels that the engine runs inside another one: its
        fused_kernels, and under tensor parallelism, for the model types of allreduce_norm,
        each RMSNorm right after an all-reduce (a layer's first norm: after the previous
        layer's, not after the embedding) with the fp8 quantization right after it. Only
        memory-bound kernels fuse (norms, elementwise, copies): a GEMM, attention or
        collective named in fused_kernels keeps its own time."""
        e, ops = self.engine, part.ops
        out = [i for i, op in enumerate(ops) if op.name in e.fused_kernels]
        if self.base.tp > 1 and self.cfg.model_type in e.allreduce_norm:
            n = len(ops)
            for i, op in enumerate(ops):
                if i:
                    before = ops[i - 1]
                elif part.layer0:  # the previous layer's last kernel (repeat > 1: every one)
                    before = ops[-1]
                else:
                    continue
                if (op.kind == "norm" and before.kind == "collective"
                        and before.coll == "allreduce"):  # type: ignore[attr-defined]  # fmt: skip
                    out.append(i)
                    if i + 1 < n and ops[i + 1].name.endswith("_quant"):
                        out.append(i + 1)
        return [i for i in out if ops[i].kind in _FUSABLE]

    def _kernel_s(self, coster, op: Op) -> float:  # noqa: ANN001
        key = (id(coster), op)
        t = self._op_s.get(key)
        if t is None:
            t = self._op_s[key] = coster.row(op)[7] * 1e-3
        return t

    # ---------------------------------------------------------------------------- one step
    def _forward(self, tokens: int, graph: int, rows: int, chunks: tuple[tuple[int, int], ...],
                 n_dec: int, ctx_mean: int) -> Timed:  # fmt: skip
        key = (tokens, graph, rows, chunks, n_dec, ctx_mean)
        hit = self._forwards.get(key)
        if hit is not None:
            return hit
        if len(self._forwards) > 200_000:
            self._forwards.clear()
        segs, (coster, gap) = self._layout(tokens, graph)
        out = Timed()
        for seg in segs:
            run = seg.runs[0]
            for (op, host, what), after in zip(seg.variable, seg.runs[1:], strict=True):
                t = 0.0
                if what == "head":
                    t = self._kernel_s(coster, replace(op, m=max(1, rows)))
                elif self.engine.attention == "gather_sdpa":
                    window = what == "attn_window"
                    t = self._gathered(coster, op, n_dec, ctx_mean, chunks, window, graph > 0)
                    if window and host:  # the window's cache path: 3 more calls (_WINDOW_CALLS)
                        host *= 1 + _WINDOW_CALLS
                else:
                    if n_dec:  # a graph's padding slots hold no cache: the real decodes
                        t += self._kernel_s(coster, replace(
                            op, batch=n_dec, q_len=1, kv_len=ctx_mean))  # fmt: skip
                    for c, past in chunks:
                        t += self._kernel_s(coster, replace(op, batch=1, q_len=c,
                                                            kv_len=past + c))  # fmt: skip
                run = run.then(Timed(t + gap, host, host, 1)).then(after)
            out = out.then(run.times(seg.repeat))
        self._forwards[key] = out
        return out

    def cache_heads(self, op: Op) -> int:
        """The KV heads one rank's paged cache holds for `op`'s layer: the model's, split by
        tensor parallelism (at least one), or every query head where the model broadcasts its
        K and V (kv_broadcast). Not op.kv_heads: a CUDA-graph decode's attention op comes after
        static_cache_attention repeated them, and tensor parallelism may leave one head."""
        if self.cfg.kv_broadcast:
            return op.heads  # type: ignore[attr-defined]
        return max(1, self.cfg.kv_heads // self.base.tp)

    def _gathered(self, coster, op: Op, n_dec: int, ctx_mean: int,  # noqa: ANN001
                  chunks: tuple[tuple[int, int], ...], window: bool = False,
                  graph: bool = False) -> float:  # fmt: skip
        """Hugging Face's paged|sdpa over the step (EngineProfile.attention): gather every
        sequence's cached K and V, repeat the KV heads to the query heads, one masked SDPA of
        all the step's queries against all of it; a sliding-window layer also scatters the
        step's new keys and values into what it gathered (_SCATTER_BYTES)."""
        from gpuperf.dtypes import BYTES
        from gpuperf.perfmodel.ops import Attention, Copy
        from gpuperf.workloads.transformer_layers import contiguous_kv_ops, repeat_kv_ops

        past = n_dec * ctx_mean + sum(p for _, p in chunks)
        keys = past + sum(c for c, _ in chunks)  # the cache and the step's own tokens
        kv = op.kv_dtype or op.dtype
        elt = 2 * op.head_dim * BYTES[kv]  # K and V
        # A CUDA-graph decode step keeps the accounting its runs were checked with: its op comes
        # after static_cache_attention repeated K and V over the graph's nominal cache, and its
        # gather is sized by those repeated heads, an over-count that stands in for the padded
        # reads of captured shapes, which are not modelled (the *_graphs runs of serve_hf.json
        # and serve_hf_families.json: within 6%; 12-23% too fast when sized by the cache's
        # heads without the nominal repeat).
        kvh = op.kv_heads if graph else self.cache_heads(op)  # type: ignore[attr-defined]
        # once any sequence reads its cache, the whole step's keys are gathered (cache.update)
        gathered = keys if past else 0
        t = self._kernel_s(coster, Copy("attn/gather", gathered * kvh * elt, op.dtype))
        if window and gathered:  # K and V each: masked_scatter_ of the step's new tokens
            t += 2 * sum(self._kernel_s(coster, k) for k in window_scatter(op, gathered, kvh))
        # K and V, gathered as [keys, heads, dim], reach SDPA as a transposed view: repeat_kv
        # copies each to every query head (GQA, as the eager layer's op: transformer_layers),
        # and without GQA PyTorch's cuDNN SDPA makes each contiguous, a non-vectorized copy as
        # cp_torch's (serve_hf_copy_probe.json: Phi-3-mini's [1, 32, keys, 96] K and V, 65 us
        # a call, +8% in the median of its 36 shapes). One KV head repeats as a view and a
        # single head's transposed view is already contiguous: no copy (as static_cache_
        # attention's multi-query case).
        full = keys * op.heads * op.head_dim
        repeated = graph and self.cfg.kv_heads != self.cfg.heads  # by the graph's layer
        if kvh > 1 and op.heads != kvh:
            t += sum(self._kernel_s(coster, k) for k in repeat_kv_ops(full, kv))
        elif kvh > 1 and not repeated:
            t += sum(
                self._kernel_s(coster, k) for k in contiguous_kv_ops(full, kv, "attn/{}_contiguous")
            )
        q = max(1, n_dec + sum(c for c, _ in chunks))
        return t + self._kernel_s(
            coster,
            Attention(
                op.name, 1, op.heads, op.heads, q, keys, op.head_dim, False, op.dtype, mask=True
            ),
        )

    def step_s(self, chunks: tuple[tuple[int, int], ...], n_dec: int, sum_ctx: int,
               rows: int, new_shape: bool = False) -> float:  # fmt: skip
        """Seconds of a step with prefill `chunks` ((tokens, tokens already cached) each),
        `n_dec` decodes whose contexts sum to `sum_ctx`, and `rows` sequences sampling a token;
        new_shape: its gathered SDPA has a shape the run has not met, so cuDNN plans it (the
        simulator says so only for an engine with plan_new_shapes outside CUDA graphs)."""
        e = self.engine
        tokens = n_dec + sum(c for c, _ in chunks)
        seqs = n_dec + len(chunks)
        cached = sum_ctx + sum(c + p for c, p in chunks)
        dispatches = e.step_overhead + e.per_seq * seqs + e.per_kv_token * cached
        if not e.cuda_graphs:
            dispatches += e.eager_step
        host = self.gpu.params.host_dispatch_s * dispatches
        if new_shape:
            host += self.gpu.params.host_attn_plan_s
        ctx = _round_ctx(-(-sum_ctx // n_dec)) if n_dec else 0
        chunks = tuple((c, _round_ctx(p) if p else 0) for c, p in chunks)
        if not chunks:
            graph = e.graph_batch(n_dec)
            if graph:
                return host + self._forward(graph, graph, graph, (), n_dec, ctx).end
        i = bisect.bisect_left(self.grid, tokens)
        if i >= len(self.grid) or self.grid[i] == tokens:  # on the grid, or past it: exactly
            return host + self._forward(tokens, 0, rows, chunks, n_dec, ctx).end
        lo, hi = self.grid[i - 1], self.grid[i]
        t_lo = self._forward(lo, 0, rows, chunks, n_dec, ctx).end
        t_hi = self._forward(hi, 0, rows, chunks, n_dec, ctx).end
        return host + t_lo + (t_hi - t_lo) * (tokens - lo) / (hi - lo)


def kv_capacity_tokens(cfg: ModelConfig, gpu: GpuSpec, engine: EngineProfile,
                       base: Scenario) -> tuple[int, dict[str, float]]:  # fmt: skip
    """Tokens the paged KV cache of one replica holds (whole blocks), and the memory terms per
    GPU (bytes): the engine's share of the GPU less the weights and one step's working set."""
    from gpuperf.step.memory import (
        inference_activation_bytes,
        kv_cache_bytes,
        kv_share,
        weight_bytes,
    )

    if cfg.layer_pattern:  # a request's Mamba-2 state is fixed, not paged per token
        from gpuperf.errors import InputError

        raise InputError(f"{cfg.name}: gpuperf serve does not simulate hybrid (Mamba-2) models "
                         "yet (their cache holds a fixed state per request beside the paged "
                         "attention KV); gpuperf predict models their steps")  # fmt: skip
    tp = base.tp
    weights = weight_bytes(cfg, base.dtype, base.weight_dtype) / tp
    work = inference_activation_bytes(cfg, replace(base, mode="prefill", batch=1,
                                                   seq=engine.token_budget))  # fmt: skip
    per_token = kv_cache_bytes(cfg, 1, 1, base.kv) * kv_share(cfg, tp)
    budget = gpu.hbm_bytes * engine.mem_fraction
    free = budget - weights - work
    blocks = max(0, math.floor(free / (per_token * engine.block_size)))
    terms = {
        "engine_budget": budget,
        "weights": weights,
        "workspace": work,
        "kv_cache": blocks * engine.block_size * per_token,
        "kv_per_token": per_token,
    }
    return blocks * engine.block_size, terms  # fmt: skip
