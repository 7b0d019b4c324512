"""One serving simulation from the user's options: engine, step timer, cache, workload, result."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuperf.errors import InputError, shown, unknown_argument

if TYPE_CHECKING:
    from gpuperf.hardware.spec import GpuSpec, SystemSpec
    from gpuperf.step.serve import ServeResult
    from gpuperf.step.serve_engines import EngineProfile
    from gpuperf.workloads.config import ModelConfig

ENGINE_OPTIONS = ("token_budget", "max_seqs", "block_size", "mem_fraction", "chunked_prefill",
                  "cuda_graphs", "step_overhead", "per_seq", "per_kv_token",
                  "eager_step", "attention", "admit_margin", "reserve_full", "mixed_prefill",
                  "batch_wait_iters", "batch_wait_tokens", "new_token_ratio")  # fmt: skip


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
    track_record: dict[str, Any] = field(default_factory=dict)  # gpuperf.step.track_record

    def to_dict(self, per_request: bool = True) -> dict[str, Any]:
        from dataclasses import asdict

        r = self.result
        out: dict[str, Any] = {
            "model": self.model, "gpu": self.gpu, "tp": self.tp, "gpus": self.tp,
            "engine": asdict(self.engine), "workload": self.workload,
            "summary": self.summary, "memory_bytes": self.memory,
            "series": r.series, "warnings": self.warnings, "track_record": self.track_record,
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


class Server:
    """One replica of `tp` GPUs serving `cfg` with an engine: the step timer and the cache,
    built once and run on any workload."""

    def __init__(self, cfg: ModelConfig, gpu: GpuSpec, system: SystemSpec | None,
                 engine: str | os.PathLike[str] | EngineProfile, *, tp: int = 1,
                 dtype: str = "bf16", kv_dtype: str | None = None,
                 weight_dtype: str | None = None, kv_tokens: int | None = None,
                 **options: Any) -> None:  # fmt: skip
        from gpuperf.step.serve_steps import StepTimer, kv_capacity_tokens
        from gpuperf.workloads.scenario import Scenario

        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
            raise InputError(f"tp must be a positive integer, got {shown(tp)}")
        if kv_tokens is not None and (not isinstance(kv_tokens, int) or
                                      isinstance(kv_tokens, bool) or kv_tokens < 1):  # fmt: skip
            raise InputError(f"kv_tokens must be a whole number of tokens, got {shown(kv_tokens)}")
        from gpuperf.workloads.groups import MAX_GPUS_WITHOUT_SYSTEM

        per_node = system.gpus_per_node if system is not None else MAX_GPUS_WITHOUT_SYSTEM
        if tp > per_node:
            where = system.name if system is not None else "one node without --system"
            raise InputError(f"tp={tp} spans nodes ({where}: {per_node} GPUs per node); a "
                             "serving replica's tensor parallelism stays in one node: lower "
                             "--tp")  # fmt: skip
        self.cfg, self.gpu, self.tp = cfg, gpu, tp
        self.engine = prof = engine_profile(engine, options)
        self.builtin = builtin_name(engine)
        base = Scenario(mode="prefill", impl=prof.impl, dtype=dtype, kv_dtype=kv_dtype,  # type: ignore[arg-type]
                        weight_dtype=weight_dtype, tp=tp,  # type: ignore[arg-type]
                        tp_allreduce=prof.tp_allreduce if tp > 1 else "nccl")  # type: ignore[arg-type]  # fmt: skip
        self.timer = StepTimer(cfg, gpu, system, prof, base)
        self.base = base
        cap, self.memory = kv_capacity_tokens(cfg, gpu, prof, base)
        self.kv_tokens = cap if kv_tokens is None else kv_tokens
        if self.kv_tokens <= 0:
            from gpuperf.step.serve import DoesNotFit
            from gpuperf.units import fmt_bytes

            m = self.memory
            room = m["engine_budget"] - m["weights"] - m["workspace"]
            if room > 0:  # the weights fit; the cache holds no whole block
                raise DoesNotFit(
                    f"the KV cache's {fmt_bytes(room)} per GPU hold no block of "
                    f"{prof.block_size:,} tokens ({fmt_bytes(m['kv_per_token'] * prof.block_size)}"
                    "); lower --block-size or raise --tp"
                )
            raise DoesNotFit(
                f"{cfg.name} does not fit for serving on {tp} x {gpu.name}: weights "
                f"{fmt_bytes(m['weights'])} and workspace {fmt_bytes(m['workspace'])} per GPU "
                f"of {fmt_bytes(m['engine_budget'])} the engine may use; raise --tp"
            )

    def run(self, work: Any, progress: Any = None) -> ServeReport:
        from gpuperf.step.serve import simulate
        from gpuperf.workloads.config import quantization_warning

        cfg, kv_tokens = self.cfg, self.kv_tokens
        result = simulate(work, self.timer, self.engine, kv_tokens, progress)
        report = ServeReport(cfg.name, self.gpu.name, self.tp, self.engine, work.label, result,
                             self.memory)  # fmt: skip
        report.summary = result.summary(gpus=self.tp)
        report.track_record = self.track_record()
        if result.preemptions:
            report.warnings.append(
                f"{result.preemptions} preemptions: the KV cache ({kv_tokens:,} tokens) ran "
                "full; their requests were prefilled again (more --tp, a lower rate or shorter "
                "requests)"
            )
        e = self.engine
        prompt = max(result.prompt)
        room = min(e.step_seqs, len(result.prompt) - 1)  # decodes that may share its step
        if not e.chunked_prefill and e.mixed_prefill and prompt + room > e.token_budget:
            report.warnings.append(
                f"without chunked prefill a step holds a whole prompt: the longest ({prompt:,} "
                f"tokens) leaves room for {max(0, e.token_budget - prompt):,} of up to "
                f"{room:,} decodes in the token budget of {e.token_budget:,}, so it waits for "
                f"decodes to end; --token-budget {prompt + room:,} holds both (trtllm-bench "
                "sets max_num_tokens so)"
            )
        quant = quantization_warning(cfg, self.base.dtype, self.base.weight_dtype, train=False)
        if quant:
            report.warnings.append(quant)
        unfused = self.unfused
        if unfused:  # a profile the user wrote: a misspelt name would fuse nothing, silently
            report.warnings.append(
                f"fused_kernels names {', '.join(unfused)}, which no kernel of {cfg.name} has "
                "here: nothing is fused for it (`gpuperf predict --format json` lists the "
                "kernels' names)"
            )
        limit = getattr(cfg, "max_position_embeddings", None)
        longest = max(p + o for p, o in zip(result.prompt, result.output, strict=True))
        if limit and longest > limit:
            report.warnings.append(f"requests of {longest} tokens exceed the model's {limit} "
                                   "positions: the prediction extrapolates")  # fmt: skip
        return report

    @functools.cached_property
    def unfused(self) -> list[str]:
        """A user profile's fused_kernels that no kernel of the model has (StepTimer.unfused):
        looked for once per server, not on each of an SLO search's runs."""
        return self.timer.unfused() if self.builtin is None else []

    def track_record(self) -> dict[str, Any]:
        """How sure the simulation is (gpuperf.step.track_record.for_serve)."""
        from gpuperf.step.track_record import for_serve

        return for_serve(self.builtin, self.gpu, self.tp)


def builtin_name(engine: Any) -> str | None:
    """The built-in profile's name `engine` asks for; None for a .toml or a profile object."""
    if isinstance(engine, str) and not engine.endswith(".toml") and os.sep not in engine:
        return engine.lower()
    return None


def engine_profile(engine: Any, options: dict[str, Any]) -> EngineProfile:
    """The engine's profile with `options` applied; InputError for an unknown option."""
    from gpuperf.step.serve_engines import EngineProfile, load_engine

    unknown = sorted(set(options) - set(ENGINE_OPTIONS))
    if unknown:
        raise unknown_argument(unknown[0], ENGINE_OPTIONS)
    if not isinstance(engine, str | os.PathLike | EngineProfile):
        raise InputError(f"engine must be a name (hf, vllm, sglang, trtllm) or a .toml path, got "
                         f"{shown(engine)}")  # fmt: skip
    return load_engine(engine, **options)


def _seed(seed: object) -> int:
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise InputError(f"seed must be a whole number >= 0, got {shown(seed)}")
    return seed


def _drawn(
    isl: str | int | None, osl: str | int | None, seed: int | None
) -> tuple[str | int, str | int, int]:
    """isl, osl and seed, with the defaults for those not given (512, 128 tokens; seed 0)."""
    return 512 if isl is None else isl, 128 if osl is None else osl, 0 if seed is None else seed


def _check_progress(progress: Any) -> None:
    if progress is not None and not callable(progress):
        raise InputError(f"progress must be a function (done, total), got {shown(progress)}")


def run_serve(cfg: ModelConfig, gpu: GpuSpec, system: SystemSpec | None,
              engine: str | os.PathLike[str] | EngineProfile, *, tp: int = 1,
              isl: str | int | None = None, osl: str | int | None = None,
              requests: int | None = None, rate: float | None = None,
              concurrency: int | None = None, trace: str | os.PathLike[str] | None = None,
              seed: int | None = None, dtype: str = "bf16",
              kv_dtype: str | None = None, weight_dtype: str | None = None,
              progress: Any = None, kv_tokens: int | None = None, workload: Any = None,
              **options: Any) -> ServeReport:  # fmt: skip
    """Simulate (api.serve's docstring); kv_tokens: the cache's size instead of the memory
    model's (a measured run's); workload: a serve_load.Workload instead of the options. isl,
    osl and seed (default 512, 128, 0) draw requests: a trace or a workload brings its own."""
    from gpuperf.step.serve_load import Workload, make_workload, parse_lengths

    if trace is not None or workload is not None:
        drawn = [k for k, v in (("isl", isl), ("osl", osl), ("seed", seed)) if v is not None]
        if drawn:
            flags = ", ".join(f"--{k}" for k in drawn)
            source = "trace" if trace is not None else "workload"
            them = "them" if len(drawn) > 1 else "it"
            raise InputError(f"the {source} sets each request's lengths and arrival, so {flags} "
                             f"would be ignored: drop {them}")  # fmt: skip
    isl, osl, seed = _drawn(isl, osl, seed)
    _seed(seed)
    if workload is not None and not isinstance(workload, Workload):
        raise InputError(f"workload must be a serve_load.Workload, got {shown(workload)}")
    _check_progress(progress)
    server = Server(cfg, gpu, system, engine, tp=tp, dtype=dtype, kv_dtype=kv_dtype,
                    weight_dtype=weight_dtype, kv_tokens=kv_tokens, **options)  # fmt: skip
    work = workload or make_workload(parse_lengths(isl, "--isl"), parse_lengths(osl, "--osl"),
                                     requests=requests, rate=rate, concurrency=concurrency,
                                     trace=trace, seed=seed)  # fmt: skip
    return server.run(work, progress)


@dataclass
class ServePlan:
    """`--slo` (and `--gpus`): each split's best rate, the best split, the Pareto frontier."""

    model: str
    gpu: str
    gpus: int
    engine: str
    slo: dict[str, float]
    splits: list[Any]
    frontier: list[dict[str, float]]
    best: Any = None
    track_record: dict[str, Any] = field(default_factory=dict)  # gpuperf.step.track_record

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {"model": self.model, "gpu": self.gpu, "gpus": self.gpus, "engine": self.engine,
                "slo": self.slo, "best": asdict(self.best) if self.best else None,
                "splits": [asdict(s) for s in self.splits], "frontier": self.frontier,
                "track_record": self.track_record}  # fmt: skip


def plan_serving(cfg: ModelConfig, gpu: GpuSpec, system: SystemSpec | None,
                 engine: str | os.PathLike[str] | EngineProfile, slo: str, *,
                 gpus: int | None = None, tp: int | None = None,
                 isl: str | int | None = None, osl: str | int | None = None,
                 requests: int | None = None, seed: int | None = None,
                 dtype: str = "bf16", kv_dtype: str | None = None,
                 weight_dtype: str | None = None, progress: Any = None,
                 **options: Any) -> ServePlan:  # fmt: skip
    """The highest Poisson rate within `slo` on one replica of `tp` GPUs (default 1), or, with
    `gpus`, for every split of them into tensor-parallel replicas (step.serve_slo): the split
    sets tp, so giving both is refused."""
    from gpuperf.step.plan import check_model
    from gpuperf.step.serve import DoesNotFit
    from gpuperf.step.serve_load import count_of, make_workload, parse_lengths
    from gpuperf.step.serve_slo import (
        FRONTIER_RATES,
        SplitResult,
        best_rate,
        meets,
        pareto,
        parse_slo,
    )
    from gpuperf.workloads.scenario import Scenario

    if gpus is not None and tp is not None:
        raise InputError(
            f"tp={tp} and gpus={gpus}: with gpus the search tries every tensor-parallel size that "
            "splits them into replicas; give one of tp (one replica) and gpus (--tp, --gpus)"
        )
    targets = parse_slo(slo)
    isl, osl, seed = _drawn(isl, osl, seed)
    _seed(seed)
    prof = engine_profile(engine, options)  # bad options are the user's: exit 2, not a note
    _check_progress(progress)
    n = 300 if requests is None else count_of(requests, "--requests")
    lengths = parse_lengths(isl, "--isl"), parse_lengths(osl, "--osl")
    if any(k.startswith("tpot") for k in targets) and lengths[1].most < 2:  # between tokens
        raise InputError("a TPOT target needs answers of at least 2 tokens (--osl 2 or "
                         "more): one-token answers have no time per output token")  # fmt: skip
    if gpus is None:
        tp = 1 if tp is None else tp
        sizes, total = [tp], tp
    else:
        limit = system.gpus_per_node if system is not None else 8
        sizes = [t for t in range(1, min(gpus, limit) + 1) if gpus % t == 0]
        total = gpus
    splits, points = [], []
    for i, t in enumerate(sizes):
        if progress is not None:
            progress(i, len(sizes))
        try:
            if gpus is not None:  # a split the model cannot take is a note, not an error
                check_model(cfg, Scenario(tp=t))
            server = Server(cfg, gpu, system, prof, tp=t, dtype=dtype, kv_dtype=kv_dtype,
                            weight_dtype=weight_dtype)  # fmt: skip
            burst = server.run(make_workload(*lengths, requests=n, seed=seed)).summary
        except DoesNotFit as exc:
            splits.append(SplitResult(t, total // t, 0.0, None, why=str(exc)))
            continue
        except InputError as exc:
            if gpus is None or not str(exc).startswith("tp="):
                raise
            splits.append(SplitResult(t, total // t, 0.0, None, why=str(exc)))
            continue

        def at(rate: float, server: Server = server) -> dict[str, Any]:
            return server.run(make_workload(*lengths, requests=n, rate=rate, seed=seed)).summary

        ceiling = burst["requests_per_s"]
        rate, summary = best_rate(at, targets, ceiling)
        replicas = total // t
        split = SplitResult(t, replicas, rate * replicas, summary)
        if summary is None:
            split.why = "no rate meets the SLO"
        for k in range(1, FRONTIER_RATES + 1):
            s = at(ceiling * k / FRONTIER_RATES)
            split.points.append({"tp": t, "rate": ceiling * k / FRONTIER_RATES * replicas,
                                 "tokens_per_s_per_gpu": s["output_tokens_per_s"] / t,
                                 "tokens_per_s_per_user": s["tokens_per_s_per_user"],
                                 "meets_slo": meets(s, targets)})  # fmt: skip
        points += split.points
        splits.append(split)
    if progress is not None:
        progress(len(sizes), len(sizes))
    if not points:  # no split could run at all: why, as a plain `gpuperf serve` says it
        if len(splits) == 1:
            raise DoesNotFit(splits[0].why)
        raise DoesNotFit(f"no split of {total} GPUs can serve {cfg.name}: "
                         + "; ".join(f"tp{s.tp}: {s.why}" for s in splits))  # fmt: skip
    ok = [s for s in splits if s.rate > 0]
    best = max(ok, key=lambda s: s.rate) if ok else None
    from gpuperf.step.track_record import for_serve

    record = for_serve(builtin_name(engine), gpu, max(sizes))
    return ServePlan(cfg.name, gpu.name, total, prof.name, targets, splits, pareto(points), best,
                     record)  # fmt: skip
