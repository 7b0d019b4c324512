"""mode=generate: an answer of `new_tokens` tokens to a prompt of `seq`: the prefill samples the
first, then `new_tokens` - 1 decode steps follow with the KV context growing from `seq` (as
Hugging Face's generate(max_new_tokens=new_tokens) and `gpuperf serve`'s --osl count). The decode
steps are evaluated at DECODE_POINTS contexts and weighted so that their sum is exact for a step
time linear in the context (decode_weights)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuperf.step.columns import Columns
    from gpuperf.step.plan import Placement
    from gpuperf.step.result import Prediction
    from gpuperf.workloads.config import ModelConfig
    from gpuperf.workloads.scenario import Scenario


def decode_weights(
    first: int, count: int, points: int | None = None
) -> tuple[list[int], list[float]]:
    """Context points and weights so that sum_k w_k f(p_k) ≈ sum_{c=first}^{first+count-1} f(c)
    (f linearly interpolated between the points: exact for f linear in the context).

    In plain Python, each step as numpy took it before (np.linspace, round, unique, np.interp of
    each point's hat function, summed pairwise), so that the weights are the same to the bit;
    a hat is evaluated only where it is not 0.0."""
    from gpuperf.step.columns import total_within
    from gpuperf.step.run import DECODE_POINTS

    points = DECODE_POINTS if points is None else points
    num, last = min(points, count), first + count - 1
    if num > 1:
        step = float(last - first) / (num - 1)
        grid = [i * step + first for i in range(num - 1)] + [float(last)]
    else:
        grid = [float(first)][:num]
    pts = sorted({round(x) for x in grid})
    if len(pts) == 1:
        return pts, [float(count)]
    weights = []
    for k, b in enumerate(pts):
        # np.interp of point k's hat at every context: it rises from the previous point, falls
        # to the next one, and is 0.0 elsewhere (so its sum reads only those blocks).
        hat = [0.0] * count
        hat[b - first] = 1.0
        lo = hi = b - first
        if k:
            a = pts[k - 1]
            up = 1.0 / (b - a)
            hat[a + 1 - first : b - first] = [up * (x - a) + 0.0 for x in range(a + 1, b)]
            lo = a + 1 - first
        if k + 1 < len(pts):
            c = pts[k + 1]
            down = -1.0 / (c - b)
            hat[b + 1 - first : c - first] = [down * (x - b) + 1.0 for x in range(b + 1, c)]
            hi = c - first
        weights.append(total_within(hat, lo, hi + 1))
    return pts, weights


def predict_generate(cfg: ModelConfig, sc: Scenario, where: Placement) -> Prediction:
    """One generation (module docstring); extra has ttft_ms, tpot_ms and decode_tokens_per_s."""
    from gpuperf.step.columns import nrows
    from gpuperf.step.memory import busiest
    from gpuperf.step.mfu import decode_attention_flops, matmul_params, model_flops_per_token
    from gpuperf.step.result import SUMMED, Prediction, intensity, with_share
    from gpuperf.step.run import _predict_step, throughput

    pre_sc = replace(sc, mode="prefill", kv_lengths="new")  # a prompt: no decode steps
    pre = _predict_step(cfg, pre_sc, where)
    n = sc.new_tokens - 1  # decode steps: the prefill samples the first token
    pts, w = decode_weights(sc.seq, n) if n else ([], [])
    steps = []
    for c in pts:  # each step a decode step: its host costs (e.g. the attention plan) apply
        steps.append(_predict_step(cfg, replace(sc, mode="decode", ctx=int(c)), where))

    def table() -> Columns:
        pre_t = dict(pre.columns)
        pre_t["name"] = ["prefill/" + v for v in pre_t["name"]]
        if not steps:
            return with_share(pre_t)
        mid = steps[len(steps) // 2].columns
        dec = dict(mid)
        if all(nrows(s.columns) == nrows(mid) for s in steps):
            for col in SUMMED:  # elementwise, in the order numpy added the weighted arrays
                cols = [s.columns[col] for s in steps]
                dec[col] = [sum(wk * c[i] for wk, c in zip(w, cols, strict=True))
                            for i in range(nrows(mid))]  # fmt: skip
        else:  # the op list changes with the context: scale the middle step
            for col in SUMMED:
                dec[col] = [v * n for v in mid[col]]
        dec["intensity"] = intensity(dec["flops"], dec["bytes"])
        dec["shape"] = [f"{v} ×{n} steps" for v in dec["shape"]]
        dec["name"] = ["decode/" + v for v in dec["name"]]
        return with_share({c: pre_t[c] + dec[c] for c in pre_t})

    decode_ms = float(sum(wk * s.total_ms for wk, s in zip(w, steps, strict=True)))
    total_ms = pre.total_ms + decode_ms
    busy = pre.extra["gpu_busy_ms"] + float(
        sum(wk * s.extra["gpu_busy_ms"] for wk, s in zip(w, steps, strict=True))
    )
    # The step's breakdown and host time as every other mode reports them: the prefill's plus
    # each decode step's, weighted as the decode time is.
    breakdown = dict(pre.extra.get("breakdown_ms", {}))
    host_ms = pre.extra.get("host_ms", 0.0)
    plan_ms = pre.extra.get("attn_plan_ms", 0.0)
    for wk, st in zip(w, steps, strict=True):
        for k, v in st.extra.get("breakdown_ms", {}).items():
            breakdown[k] = breakdown.get(k, 0.0) + wk * v
        host_ms += wk * st.extra.get("host_ms", 0.0)
        plan_ms += wk * st.extra.get("attn_plan_ms", 0.0)
    pred = Prediction(
        build=table,
        total_ms=total_ms,
        gpu=where.gpu.name,
        memory=busiest(cfg, sc, where.groups),
        extra={
            "ttft_ms": pre.total_ms,
            # a one-token answer has no decode step: no time per output token after the first
            "tpot_ms": decode_ms / n if n else None,
            "decode_ms": decode_ms,
            "decode_tokens_per_s": sc.batch * sc.dp * n / (decode_ms * 1e-3) if n else None,
            "decode_ctx_points": [int(p) for p in pts],
            "kernels": pre.extra["kernels"]
            + (steps[len(steps) // 2].extra["kernels"] * n if n else 0),
            "gpu_busy_ms": busy,
            "host_bound": breakdown.get("host", 0.0) / total_ms if total_ms > 0 else 0.0,
            "dispatch_us": pre.extra["dispatch_us"],
            "host_ms": host_ms,
            "attn_plan_ms": plan_ms,
            "breakdown_ms": {k: v for k, v in breakdown.items() if v},
        },
    )
    if "pacing_stage" in pre.extra:
        pred.extra["pacing_stage"] = pre.extra["pacing_stage"]
    # Model FLOPs: the prefill's tokens at the prompt's length, each decode step at its context.
    flops = sc.batch * sc.seq * model_flops_per_token(cfg, pre_sc)[0]
    if n:
        flops += sc.batch * (n * 2.0 * matmul_params(cfg) + decode_attention_flops(cfg, sc.seq, n))
    tokens = sc.batch * (sc.seq + n)  # the tokens the steps feed through the model
    pred.mfu_convention = pre.mfu_convention
    throughput(pred, where.gpu, sc, tokens, sc.batch * sc.new_tokens, flops / tokens, cfg=cfg)
    for text in [*pre.warnings, *(steps[-1].warnings if steps else [])]:
        if text not in pred.warnings:
            pred.warnings.append(text)
    return pred
