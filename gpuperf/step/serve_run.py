"""One serving simulation from the user's options: engine, step timer, cache, workload, result."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuperf.errors import InputError, shown

if TYPE_CHECKING:
    from gpuperf.hardware.spec import GpuSpec, SystemSpec
    from gpuperf.step.serve import ServeResult
    from gpuperf.step.serve_engines import EngineProfile
    from gpuperf.workloads.config import ModelConfig

ENGINE_OPTIONS = ("token_budget", "max_seqs", "block_size", "mem_fraction", "chunked_prefill",
                  "cuda_graphs", "step_overhead_s", "per_seq_s", "per_kv_token_s",
                  "attn_plan_s", "attention")  # fmt: skip


@dataclass
class ServeReport:
    """A serving run, simulated: what ran where, the aggregate numbers, the per-request ones."""

    model: str
    gpu: str
    tp: int
    engine: EngineProfile
    workload: str
    result: ServeResult
    memory: dict[str, float]
    summary: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self, per_request: bool = True) -> dict[str, Any]:
        from dataclasses import asdict

        r = self.result
        out: dict[str, Any] = {
            "model": self.model, "gpu": self.gpu, "tp": self.tp, "gpus": self.tp,
            "engine": asdict(self.engine), "workload": self.workload,
            "summary": self.summary, "memory_bytes": self.memory,
            "series": r.series, "warnings": self.warnings,
            "metrics": "TTFT = first token - arrival; TPOT = (E2E - TTFT) / (output tokens - 1); "
                       "E2E = last token - arrival",
        }  # fmt: skip
        if per_request:
            out["requests"] = self.requests()
        return out

    def requests(self) -> list[dict[str, Any]]:
        r = self.result
        rows = []
        for i in range(len(r.arrival)):
            n = r.output[i]
            rows.append({
                "id": i, "arrival_s": r.arrival[i], "input_tokens": r.prompt[i],
                "output_tokens": n, "ttft_ms": 1e3 * (r.first[i] - r.arrival[i]),
                "tpot_ms": 1e3 * (r.finish[i] - r.first[i]) / (n - 1) if n > 1 else None,
                "e2e_ms": 1e3 * (r.finish[i] - r.arrival[i]),
            })  # fmt: skip
        return rows


def run_serve(cfg: ModelConfig, gpu: GpuSpec, system: SystemSpec | None,
              engine: str | os.PathLike[str] | EngineProfile, *, tp: int = 1,
              isl: str | int = 512, osl: str | int = 128, requests: int | None = None,
              rate: float | None = None, concurrency: int | None = None,
              trace: str | os.PathLike[str] | None = None, seed: int = 0, dtype: str = "bf16",
              kv_dtype: str | None = None, weight_dtype: str | None = None,
              progress: Any = None, kv_tokens: int | None = None, workload: Any = None,
              **options: Any) -> ServeReport:  # fmt: skip
    """Simulate (api.serve's docstring); kv_tokens: the cache's size instead of the memory
    model's (a measured run's); workload: a serve_load.Workload instead of the options."""
    from gpuperf.step.serve import simulate
    from gpuperf.step.serve_engines import load_engine
    from gpuperf.step.serve_load import make_workload, parse_lengths
    from gpuperf.step.serve_steps import StepTimer, kv_capacity_tokens
    from gpuperf.workloads.scenario import Scenario

    unknown = sorted(set(options) - set(ENGINE_OPTIONS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], ENGINE_OPTIONS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise InputError(f"unknown argument {unknown[0]!r}{hint}")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise InputError(f"seed must be a whole number >= 0, got {shown(seed)}")
    prof = load_engine(engine, **options)
    base = Scenario(mode="prefill", impl=prof.impl, dtype=dtype, kv_dtype=kv_dtype,  # type: ignore[arg-type]
                    weight_dtype=weight_dtype, tp=tp)  # type: ignore[arg-type]  # fmt: skip
    timer = StepTimer(cfg, gpu, system, prof, base)
    cap, memory = kv_capacity_tokens(cfg, gpu, prof, base)
    kv_tokens = cap if kv_tokens is None else kv_tokens
    if kv_tokens <= 0:
        from gpuperf.units import fmt_bytes

        raise InputError(
            f"{cfg.name} does not fit for serving on {tp} x {gpu.name}: weights "
            f"{fmt_bytes(memory['weights'])} and workspace {fmt_bytes(memory['workspace'])} per "
            f"GPU of {fmt_bytes(memory['engine_budget'])} the engine may use; raise --tp"
        )
    work = workload or make_workload(parse_lengths(isl, "--isl"), parse_lengths(osl, "--osl"),
                                     requests=requests, rate=rate, concurrency=concurrency,
                                     trace=trace, seed=seed)  # fmt: skip
    result = simulate(work, timer, prof, kv_tokens, progress)
    report = ServeReport(cfg.name, gpu.name, tp, prof, work.label, result, memory)
    report.summary = result.summary(gpus=tp)
    if result.preemptions:
        report.warnings.append(
            f"{result.preemptions} preemptions: the KV cache ({kv_tokens:,} tokens) ran full; "
            "their requests were prefilled again (more --tp, a lower rate or shorter requests)"
        )
    limit = getattr(cfg, "max_position_embeddings", None)
    longest = max(result.prompt[i] + result.output[i] for i in range(len(result.prompt)))
    if limit and longest > limit:
        report.warnings.append(f"requests of {longest} tokens exceed the model's {limit} "
                               "positions: the prediction extrapolates")  # fmt: skip
    return report
