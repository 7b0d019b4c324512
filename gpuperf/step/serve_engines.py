"""Serving-engine profiles: what differs between continuous-batching engines is data.

A profile (step/engines/*.toml, or a user's .toml with `base = "vllm"`) says how the engine
schedules and runs a step: the token budget per step, the most sequences per step, the KV block
size and the memory fraction the cache may take, chunked prefill on or off, which kernels it runs
(fused like vLLM or eager PyTorch like Hugging Face), CUDA graphs for decode-only steps and their
captured batch sizes, and the host's time per step beyond kernel launches (scheduling, input
preparation, sampling, detokenization): step_overhead + per_seq x sequences + per_kv_token x
cached tokens, counted in kernel dispatches of the machine (its GPU profile's host_dispatch_s),
plus eager_step more when the step runs outside CUDA graphs.
Host work is thus measured in units of the host it runs on: a faster host shrinks all of it.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuperf.errors import InputError, shown

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ENGINES_DIR = Path(__file__).parent / "engines"


@dataclass(frozen=True)
class EngineProfile:
    """One serving engine's scheduler and runtime (module docstring); times in seconds."""

    name: str
    description: str = ""
    token_budget: int = 8192  # tokens per step (vLLM max_num_batched_tokens)
    max_seqs: int = 256  # sequences per step (vLLM max_num_seqs)
    block_size: int = 16  # KV cache block, tokens
    mem_fraction: float = 0.9  # of the GPU's memory the engine may use (weights + cache + work)
    chunked_prefill: bool = True  # a prompt may be split over steps (false: it enters whole)
    # Prefills share a step with the decodes (vLLM, TRT-LLM); false: a step runs prefill chunks
    # alone whenever a prompt is under way or the next can be admitted (all of it fitting the
    # cache), else the decodes (SGLang without --enable-mixed-chunk; with chunked_prefill =
    # false, vLLM V0)
    mixed_prefill: bool = True
    # Admit a request only when the cache can hold its whole prompt and answer beside every
    # running request's (TRT-LLM's GUARANTEED_NO_EVICT): never preempts; false: admit while
    # the prompt fits and preempt when decodes run out of blocks (vLLM).
    reserve_full: bool = False
    # No new request is admitted into a step that already runs something while fewer than this
    # share of the cache's blocks are free (Hugging Face's FIFO safety margin, 0.15).
    admit_margin: float = 0.0
    impl: str = "fused"  # fused kernels (vLLM, TRT-LLM) or eager PyTorch (Hugging Face)
    cuda_graphs: bool = True  # decode-only steps replayed as CUDA graphs
    graph_sizes: tuple[int, ...] = ()  # captured batch sizes (a step pads to the next one)
    # Captured sizes stop at the largest decode step the engine can run (step_seqs), and a
    # listed size past it pads to that cap (TensorRT-LLM's
    # _filter_cuda_graph_batch_sizes); false: every listed size is captured as listed
    graph_pad_cap: bool = False
    step_overhead: float = 0.0  # host work per step, in kernel dispatches
    per_seq: float = 0.0  # per sequence in the step, in dispatches
    per_kv_token: float = 0.0  # per cached token of the step's sequences, in dispatches
    # Host work per step that a CUDA-graph step does not pay, in dispatches (Hugging Face: mostly
    # cuDNN planning the step's masked SDPA for its new gathered key count,
    # benchmarks/results/h100-sxm5-80gb/serve_hf_cudnn_probe.json; hf.toml says why it stays
    # in dispatches).
    eager_step: float = 0.0
    # Each eager step whose gathered SDPA shape (its queries, its keys) the process has not met
    # pays one cuDNN plan (the GPU profile's host_attn_plan_s); a met shape reuses its plan
    # (Hugging Face's paged|sdpa; benchmarks/results/h200-sxm-141gb/sdpa_plan_key_probe.json)
    plan_new_shapes: bool = False
    # varlen: one FlashAttention-style kernel over each sequence's own cache (vLLM, TRT-LLM);
    # gather_sdpa: Hugging Face's paged|sdpa, which gathers every sequence's cache into one
    # tensor, repeats the KV heads, and runs one SDPA over all queries against all of it with a
    # block-diagonal mask (work grows with queries x all cached tokens)
    attention: str = "varlen"
    # nccl: tensor-parallel all-reduces through torch.distributed (Hugging Face); custom: the
    # engine's own one-kernel all-reduce over NVLink (vLLM, TensorRT-LLM;
    # gpuperf.perfmodel.comm_custom)
    tp_allreduce: str = "nccl"
    # Kernels of gpuperf's fused layer that the engine runs inside a neighbouring kernel (op
    # names as `gpuperf predict` lists them, e.g. "attn/rope" into the KV-cache update), for
    # every model it serves; only norms, elementwise kernels and copies fuse
    fused_kernels: tuple[str, ...] = ()
    # Model types (config.json model_type) whose tensor-parallel layers fuse each all-reduce
    # with the residual add and RMSNorm after it and the fp8 quantization of the next GEMM's
    # input (TensorRT-LLM's AllReduceFusionOp.RESIDUAL_RMS_NORM(_QUANT_FP8) in its Llama)
    allreduce_norm: tuple[str, ...] = ()
    # Batch waiting (TensorRT-LLM's batch_wait_timeout_iters / batch_wait_max_tokens_ratio):
    # while decodes run, new and continuing prefills are held back until the step's tokens
    # (whole prompts of the prefills + decodes) reach batch_wait_tokens x token_budget or
    # batch_wait_iters steps have passed; both must be above 0 to hold anything
    batch_wait_iters: int = 0
    batch_wait_tokens: float = 0.0
    # Room kept for answers (SGLang's PrefillAdder and new_token_ratio): a waiting request is
    # admitted only while its prompt and its whole answer (at most answer_clip tokens) fit the
    # free cache less new_token_ratio x every running request's answer still to come (each at
    # most answer_clip), less what this step has already promised. The ratio starts at
    # new_token_ratio, falls each decode step by its distance to new_token_ratio x
    # new_token_ratio_min over new_token_ratio_steps steps, is set after a preemption to the
    # running requests' (answer tokens so far + RETRACT_STEPS each) over their answers'
    # lengths, and starts again whenever the engine idles. 0: off (admit while the prompt fits)
    new_token_ratio: float = 0.0
    new_token_ratio_min: float = 0.14
    new_token_ratio_steps: int = 600
    answer_clip: int = 4096
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def step_seqs(self) -> int:
        """The most sequences one step runs: max_seqs, and one token each within the budget."""
        return min(self.max_seqs, self.token_budget)

    def graph_batch(self, n: int) -> int | None:
        """The captured size a decode step of n sequences replays, or None (runs eager); with
        graph_pad_cap, none past step_seqs, which a listed size past it pads to instead."""
        if not self.cuda_graphs:
            return None
        for size in self.graph_sizes:
            if size >= n:
                if not self.graph_pad_cap:
                    return size
                cap = self.step_seqs
                return min(size, cap) if n <= cap else None
        return None


_INTS = ("token_budget", "max_seqs", "block_size", "new_token_ratio_steps", "answer_clip")
_COUNTS = ("batch_wait_iters",)  # whole numbers, 0 allowed
_FLOATS = ("mem_fraction", "step_overhead", "per_seq", "per_kv_token", "eager_step", "admit_margin",
           "batch_wait_tokens", "new_token_ratio", "new_token_ratio_min")  # fmt: skip
_BOOLS = ("chunked_prefill", "mixed_prefill", "cuda_graphs", "reserve_full", "plan_new_shapes",
          "graph_pad_cap")  # fmt: skip
_KEYS = ("name", "base", "description", "impl", "attention", "tp_allreduce", "graph_sizes",
         "fused_kernels", "allreduce_norm", "sources", *_INTS, *_COUNTS,
         *_FLOATS, *_BOOLS)  # fmt: skip


def engine_names() -> list[str]:
    return sorted(p.stem for p in ENGINES_DIR.glob("*.toml"))


def load_engine(name_or_path: str | os.PathLike[str], **overrides: Any) -> EngineProfile:
    """A built-in profile by name (hf, vllm, sglang, trtllm) or a user's .toml; `overrides` replace
    fields (None: keep the profile's)."""
    if isinstance(name_or_path, EngineProfile):
        prof = name_or_path
    else:
        prof = _from_table(_read(os.fspath(name_or_path), set()))
    changes = {k: v for k, v in overrides.items() if v is not None}
    if not changes:
        return prof
    return _from_table({**dataclasses.asdict(prof), **changes}, where=f"engine {prof.name}")


def _read(name: str, seen: set[str]) -> dict[str, Any]:
    from gpuperf.fileio import read_text

    path = Path(name)
    if not (name.endswith(".toml") or os.sep in name):
        path = ENGINES_DIR / f"{name.lower()}.toml"
        if not path.exists():
            close = difflib.get_close_matches(name.lower(), engine_names(), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise InputError(
                f"unknown engine {shown(name)}{hint} (built in: {', '.join(engine_names())}; "
                "or a .toml path)"
            )
    if str(path) in seen:
        raise InputError(f"engine profile {path} names itself as its base")
    seen.add(str(path))
    try:
        table = tomllib.loads(read_text(path, "engine profile"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from None
    base = table.pop("base", None)
    if not isinstance(table.get("sources", {}), dict):
        raise InputError(f"{path}: [sources] must be a table")
    own_name = table.get("name", path.stem)
    if base is not None:
        if not isinstance(base, str):
            raise InputError(f"{path}: base must be an engine name or path, got {shown(base)}")
        if base.endswith(".toml") or os.sep in base:  # a file beside this one
            base = str(path.parent / base)
        parent = _read(base, seen)
        parent.pop("_where", None)
        sources = {**parent.get("sources", {}), **table.get("sources", {})}
        table = {**parent, **table, "sources": sources}
    table["name"] = own_name  # a profile's name is its own, never its base's
    table["_where"] = str(path)
    return table


def _from_table(t: dict[str, Any], where: str | None = None) -> EngineProfile:
    where = where or t.pop("_where", "engine profile")
    t = {k: v for k, v in t.items() if k != "_where"}
    for key in t:
        if key not in _KEYS:
            close = difflib.get_close_matches(key, _KEYS, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise InputError(f"{where}: unknown key {shown(key)}{hint}")
    out: dict[str, Any] = {}
    for key in _INTS:
        if key in t:
            v = t[key]
            if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= 1 << 24:
                raise InputError(f"{where}: {key} must be a positive integer, got {shown(v)}")
            out[key] = v
    for key in _COUNTS:
        if key in t:
            v = t[key]
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 1 << 20:
                raise InputError(f"{where}: {key} must be a whole number from 0 to {1 << 20}, "
                                 f"got {shown(v)}")  # fmt: skip
            out[key] = v
    for key in _FLOATS:
        if key in t:
            v = t[key]
            if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < 1e7:
                raise InputError(f"{where}: {key} must be a number >= 0, got {shown(v)}")
            out[key] = float(v)
    if "admit_margin" in out and not out["admit_margin"] < 1:
        raise InputError(f"{where}: admit_margin must be below 1, got {out['admit_margin']}")
    if "batch_wait_tokens" in out and not out["batch_wait_tokens"] <= 1:
        raise InputError(f"{where}: batch_wait_tokens is a share of the token budget, at most "
                         f"1, got {out['batch_wait_tokens']}")  # fmt: skip
    for key in ("new_token_ratio", "new_token_ratio_min"):
        if key in out and not out[key] <= 1:
            raise InputError(f"{where}: {key} is a share, at most 1, got {out[key]}")
    if "mem_fraction" in out and not 0 < out["mem_fraction"] <= 1:
        raise InputError(f"{where}: mem_fraction must be in (0, 1], got {out['mem_fraction']}")
    for key in _BOOLS:
        if key in t:
            if not isinstance(t[key], bool):
                raise InputError(f"{where}: {key} must be true or false, got {shown(t[key])}")
            out[key] = t[key]
    if "impl" in t:
        if t["impl"] not in ("fused", "eager"):
            raise InputError(f"{where}: impl must be fused or eager, got {shown(t['impl'])}")
        out["impl"] = t["impl"]
    if "attention" in t:
        if t["attention"] not in ("varlen", "gather_sdpa"):
            raise InputError(f"{where}: attention must be varlen or gather_sdpa, got "
                             f"{shown(t['attention'])}")  # fmt: skip
        out["attention"] = t["attention"]
    if (t.get("batch_wait_iters") and t.get("batch_wait_tokens")
            and t.get("mixed_prefill", True) is False):  # fmt: skip
        raise InputError(f"{where}: batch waiting holds back prefills that share a step with "
                         "decodes; with mixed_prefill = false they never do, so it would hold "
                         "nothing: allow mixed_prefill or drop batch_wait_iters")  # fmt: skip
    if t.get("plan_new_shapes") and t.get("attention", "varlen") != "gather_sdpa":
        raise InputError(f"{where}: plan_new_shapes describes the gathered SDPA of "
                         "attention = \"gather_sdpa\" (Hugging Face's paged|sdpa)")  # fmt: skip
    if "tp_allreduce" in t:
        from gpuperf.workloads.scenario import TP_ALLREDUCES

        if t["tp_allreduce"] not in TP_ALLREDUCES:
            raise InputError(f"{where}: tp_allreduce must be {' or '.join(TP_ALLREDUCES)}, got "
                             f"{shown(t['tp_allreduce'])}")  # fmt: skip
        out["tp_allreduce"] = t["tp_allreduce"]
    if "graph_sizes" in t:
        sizes = t["graph_sizes"]
        ok = isinstance(sizes, list | tuple) and all(
            isinstance(s, int) and not isinstance(s, bool) and 0 < s <= 1 << 16 for s in sizes
        )
        if not ok:
            raise InputError(f"{where}: graph_sizes must be a list of positive integers")
        out["graph_sizes"] = tuple(sorted(set(sizes)))
    for key in ("fused_kernels", "allreduce_norm"):
        if key in t:
            names = t[key]
            if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
                raise InputError(f"{where}: {key} must be a list of names, got {shown(names)}")
            out[key] = tuple(names)
    for key in ("name", "description"):
        if key in t:
            if not isinstance(t[key], str):
                raise InputError(f"{where}: {key} must be text, got {shown(t[key])}")
            out[key] = t[key]
    if "sources" in t:
        if not isinstance(t["sources"], dict):
            raise InputError(f"{where}: [sources] must be a table")
        out["sources"] = {str(k): str(v) for k, v in t["sources"].items()}
    return EngineProfile(**out)
