"""mode=generate: a prefill of `seq` tokens, then `new_tokens` decode steps with the KV context
growing from `seq`. The decode steps are evaluated at DECODE_POINTS contexts and weighted so that
their sum is exact for a step time linear in the context (decode_weights)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from gpuperf.step.plan import Placement
    from gpuperf.step.result import Prediction
    from gpuperf.workloads.config import ModelConfig
    from gpuperf.workloads.scenario import Scenario


def decode_weights(first: int, count: int, points: int | None = None) -> tuple[np.ndarray, ...]:
    """Context points and weights so that sum_k w_k f(p_k) ≈ sum_{c=first}^{first+count-1} f(c)
    (f linearly interpolated between the points: exact for f linear in the context)."""
    from gpuperf.step.run import DECODE_POINTS

    points = DECODE_POINTS if points is None else points
    pts = np.unique(np.linspace(first, first + count - 1, min(points, count)).round().astype(int))
    xs = np.arange(first, first + count)
    if pts.size == 1:
        return pts, np.array([float(count)])
    eye = np.eye(pts.size)
    return pts, np.array([np.interp(xs, pts, eye[k]).sum() for k in range(pts.size)])


def predict_generate(cfg: ModelConfig, sc: Scenario, where: Placement) -> Prediction:
    """One generation (module docstring); extra has ttft_ms, tpot_ms and decode_tokens_per_s."""
    import pandas as pd

    from gpuperf.step.memory import busiest
    from gpuperf.step.mfu import attention_flops_per_token, matmul_params, model_flops_per_token
    from gpuperf.step.result import SUMMED, Prediction, intensity, with_share
    from gpuperf.step.run import _predict_step, throughput
    from gpuperf.workloads.step_work import build

    pre_sc = replace(sc, mode="prefill")
    pre = _predict_step(cfg, pre_sc, where)
    pts, w = decode_weights(sc.seq, sc.new_tokens)
    steps = []
    for c in pts:  # each step a decode step: its host costs (e.g. the attention plan) apply
        steps.append(_predict_step(cfg, replace(sc, mode="decode", ctx=int(c)), where))

    def table() -> pd.DataFrame:
        mid = steps[len(steps) // 2].table
        dec = mid.copy()
        if all(len(s.table) == len(mid) for s in steps):
            for col in SUMMED:
                parts = zip(w, steps, strict=True)
                dec[col] = sum(wk * s.table[col].to_numpy() for wk, s in parts)
        else:  # the op list changes with the context: scale the middle step
            for col in SUMMED:
                dec[col] = mid[col] * sc.new_tokens
        dec["intensity"] = intensity(dec["flops"], dec["bytes"])
        dec["shape"] = dec["shape"] + f" ×{sc.new_tokens} steps"
        pre_t = pre.table.copy()
        pre_t["name"] = "prefill/" + pre_t["name"]
        dec["name"] = "decode/" + dec["name"]
        return with_share(pd.concat([pre_t, dec], ignore_index=True))

    decode_ms = float(sum(wk * s.total_ms for wk, s in zip(w, steps, strict=True)))
    total_ms = pre.total_ms + decode_ms
    busy = pre.extra["gpu_busy_ms"] + float(
        sum(wk * s.extra["gpu_busy_ms"] for wk, s in zip(w, steps, strict=True))
    )
    pred = Prediction(
        build=table,
        total_ms=total_ms,
        gpu=where.gpu.name,
        memory=busiest(cfg, sc, build(cfg, pre_sc, where.groups)),
        extra={
            "ttft_ms": pre.total_ms,
            "tpot_ms": decode_ms / sc.new_tokens,
            "decode_ms": decode_ms,
            "decode_tokens_per_s": sc.batch * sc.dp * sc.new_tokens / (decode_ms * 1e-3),
            "decode_ctx_points": [int(p) for p in pts],
            "kernels": pre.extra["kernels"]
            + steps[len(steps) // 2].extra["kernels"] * sc.new_tokens,
            "gpu_busy_ms": busy,
            "host_bound": 1.0 - busy / total_ms if total_ms > 0 else 0.0,
            "dispatch_us": pre.extra["dispatch_us"],
        },
    )
    # Model FLOPs: the prefill's tokens at the prompt's length, each decode step at its context.
    n = sc.new_tokens
    per_key = attention_flops_per_token(cfg, SimpleNamespace(mode="decode", ctx=0))  # T = 1
    flops = sc.batch * sc.seq * model_flops_per_token(cfg, pre_sc)[0]
    flops += sc.batch * (n * 2.0 * matmul_params(cfg) + per_key * (n * sc.seq + n * (n + 1) / 2))
    tokens = sc.batch * (sc.seq + sc.new_tokens)
    pred.mfu_convention = pre.mfu_convention
    throughput(pred, where.gpu, sc, tokens, sc.batch * sc.new_tokens, flops / tokens)
    for text in [*pre.warnings, *steps[-1].warnings]:
        if text not in pred.warnings:
            pred.warnings.append(text)
    return pred
