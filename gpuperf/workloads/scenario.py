"""Scenario: how a model is run (mode, sizes, dtypes, implementation, parallelism).

One GPU is the scenario whose parallel degrees are all 1: the step engine (gpuperf.step) runs
the same code for both, and a plan only adds what parallelism adds.

Batch sizes: `batch` counts the sequences one data-parallel replica processes in one step (in
training: between two optimizer steps). `micro_batch` splits them into micro-batches (gradient
accumulation, pipeline micro-batches); by default one micro-batch holds them all.
`global_batch` (training) is the alternative to `batch`: sequences over all dp replicas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpuperf.dtypes import WEIGHT_ONLY, DType, refuse_weight_only
from gpuperf.errors import InputError, shown

Mode = Literal["prefill", "decode", "generate", "train"]
Impl = Literal["fused", "eager", "compile"]
TpImpl = Literal["megatron", "dtensor"]
TpAllreduce = Literal["nccl", "custom"]
Recompute = Literal["none", "selective", "full", "op"]
Schedule = Literal["1f1b", "interleaved"]
AttnImpl = Literal["flash", "math"]
Fp8Scales = Literal["tensor", "row"]
MlaForm = Literal["auto", "naive", "absorbed"]
KvLengths = Literal["new", "seen"]
GradDtype = Literal["auto", "fp32", "param"]
Optimizer = Literal["auto", "fused", "torch"]
MoeDispatcher = Literal["alltoall", "deepep", "hybridep"]
MODES: tuple[Mode, ...] = ("prefill", "decode", "generate", "train")
TP_IMPLS: tuple[TpImpl, ...] = ("megatron", "dtensor")
TP_ALLREDUCES: tuple[TpAllreduce, ...] = ("nccl", "custom")
# How expert-parallel ranks exchange tokens: NCCL's all-to-all of every routed copy (Megatron-Core's
# alltoall dispatcher), or a token-deduplicating dispatch: DeepEP's and HybridEP's normal kernels
# (Megatron-Core's flex dispatcher, NeMo AutoModel) send each token once per destination GPU and,
# across nodes, once per destination node over the NIC (one model for both; gpuperf.perfmodel.comm).
MOE_DISPATCHERS: tuple[MoeDispatcher, ...] = ("alltoall", "deepep", "hybridep")
RECOMPUTE: tuple[Recompute, ...] = ("none", "selective", "full", "op")
# Megatron-Core's --recompute-modules (selective recompute): whose forwards the backward runs again
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mlp", "moe", "moe_act", "shared_experts",
                     "mla_up_proj")  # fmt: skip
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)  # Megatron-Core's, where none are given


def plan_modules(plan: str) -> frozenset[str]:
    """The modules a recompute plan (Scenario.recompute_plan) runs again: none unless selective."""
    head, _, modules = plan.partition(":")
    if head != "selective":
        return frozenset()
    return frozenset(modules.split(",") if modules else DEFAULT_RECOMPUTE_MODULES)


SCHEDULES: tuple[Schedule, ...] = ("1f1b", "interleaved")
ATTN_IMPLS: tuple[AttnImpl, ...] = ("flash", "math")
# What training runs in: int8 GEMMs are an inference format (W8A8 serving), and no framework
# trains a Transformer in them. fp8 trains as Transformer Engine does (fp8 GEMMs, bf16 elsewhere).
TRAIN_DTYPES: tuple[DType, ...] = ("bf16", "fp16", "fp32", "tf32", "fp8", "fp64")
DEGREES = ("tp", "pp", "dp", "cp", "ep")
# The parallel options (api.predict's keyword arguments, the CLI's --tp ... --nvls).
PARALLEL_FIELDS = (*DEGREES, "etp", "micro_batch", "global_batch", "zero", "dp_overlap",
                   "recompute", "recompute_modules", "sequence_parallel", "tp_impl",
                   "tp_overlap", "tp_allreduce", "schedule", "virtual_stages", "nvls",
                   "moe_imbalance", "moe_dispatcher", "ep_overlap", "grad_dtype",
                   "optimizer")  # fmt: skip
_POSITIVE = ("batch", "seq", "ctx", "new_tokens", *DEGREES, "virtual_stages")
_BOOLS = ("cuda_graphs", "tp_overlap", "nvls", "ep_overlap")
_CHOICES = {
    "mode": MODES,
    "impl": ("fused", "eager", "compile"),
    "tp_impl": TP_IMPLS,
    "tp_allreduce": TP_ALLREDUCES,
    "recompute": RECOMPUTE,
    "schedule": SCHEDULES,
    "attn": ATTN_IMPLS,
    "fp8_scales": ("tensor", "row"),
    "mla": ("auto", "naive", "absorbed"),
    "kv_lengths": ("new", "seen"),
    "grad_dtype": ("auto", "fp32", "param"),
    "optimizer": ("auto", "fused", "torch"),
    "moe_dispatcher": MOE_DISPATCHERS,
}


MAX_COUNT = 2**31  # a batch, length or degree beyond this is a typo (its token counts overflow)
MAX_NEW_TOKENS = 2**24  # generate costs each answer token's context: 16M tokens take seconds


def _positive_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_COUNT:
        raise InputError(f"{name} must be a positive integer up to {MAX_COUNT}, got {shown(value)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """One way of running a model, on one GPU or as a parallel plan.

    prefill: `batch` sequences of `seq` tokens. decode: one new token per sequence against a KV
    cache of `ctx` tokens. generate: an answer of `new_tokens` to a prompt of `seq` (the
    prefill samples the first token, new_tokens - 1 decode steps the rest). train:
    forward and backward over `batch` × `seq` tokens plus an AdamW step.

    Parallelism (1 = none): tp tensor, pp pipeline stages, dp data-parallel replicas, cp context
    (ring attention over the sequence), ep expert (carved out of dp). zero: 0 DDP (gradient
    all-reduce), 1/2 distributed optimizer (gradient reduce-scatter, parameter all-gather), 3
    FSDP2 / ZeRO-3 (parameters gathered layer by layer). dp_overlap: gradient buckets reduced
    under the backward (PyTorch DDP, the default with eager kernels) or after it (Megatron-LM's
    default, overlap_grad_reduce off; the default with fused kernels). tp_impl: megatron (plain
    collectives after the row-parallel matmul; sequence_parallel and tp_overlap apply) or dtensor
    (PyTorch DTensor, as Hugging Face's tp_plan runs it: the same collectives in the forward, one
    all-reduce per column-parallel projection in the backward, and DTensor's dispatch on the
    host). attn: flash (fused kernel) or math (scores materialized, softmax, then P·V).
    """

    mode: Mode = "prefill"
    batch: int = 1
    seq: int = 2048
    ctx: int = 2048
    new_tokens: int = 128
    dtype: DType = "bf16"
    kv_dtype: DType | None = None
    # fused: Megatron-style training or a serving engine's kernels; eager: PyTorch as Hugging
    # Face runs it; compile: PyTorch with each layer torch.compile'd (torchtitan): the layers'
    # kernels fused, everything around them (loss, optimizer, DDP/FSDP2, memory) PyTorch's.
    impl: Impl = "fused"
    cuda_graphs: bool = False
    attn: AttnImpl = "flash"
    # Weight-only quantization: int4 (group-wise, 128) or int8 weights with `dtype` activations.
    weight_dtype: DType | None = None
    fp8_scales: Fp8Scales = "tensor"  # fp8 GEMMs: one scale per tensor, or per row (token)
    mla: MlaForm = "auto"  # MLA models: the naive (expanded) or absorbed attention
    # Eager decode: each step's kv length is one the process has not met (new: cuDNN's SDPA
    # plans it, as in a process's first generate) or one it has (seen: a warmed-up process).
    kv_lengths: KvLengths = "new"
    # --- parallelism -------------------------------------------------------------------------
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    # Expert tensor parallelism: None (= tp) splits each expert tp ways and carves ep out of dp;
    # 1 is Megatron-Core's MoE parallel folding: whole experts, ep spanning the tp·cp·dp ranks,
    # each rank routing its own sequence shard (fused kernels, sequence parallelism under TP).
    etp: int | None = None
    micro_batch: int | None = None  # None: one micro-batch of `batch`
    global_batch: int | None = None  # train: sequences over all replicas (sets batch = it / dp)
    zero: int = 0
    # None: on for eager (PyTorch DDP), off for fused (Megatron); stays None where no gradients
    # are reduced (inference, dp·cp = 1)
    dp_overlap: bool | None = None
    # full: each layer's forward again in the backward; selective: Megatron's (core attention, or
    # recompute_modules); op: torchtitan's per-op policy (every second matmul's output and the
    # attention's kept, everything else recomputed; PyTorch layers: eager or compile).
    recompute: Recompute = "none"
    # With recompute="selective": Megatron-Core's --recompute-modules, the modules whose forward
    # the backward runs again instead of keeping their outputs (RECOMPUTE_MODULES); () is its
    # default, core attention alone. Fused (Megatron) training only.
    recompute_modules: tuple[str, ...] = ()
    sequence_parallel: bool | None = None  # None: on for fused megatron TP in training
    tp_impl: TpImpl = "megatron"
    tp_overlap: bool = False
    # nccl: tensor-parallel all-reduces through NCCL (torch.distributed, Megatron-LM); custom: a
    # serving engine's own one-kernel all-reduce over NVLink (vLLM, TensorRT-LLM, SGLang) for
    # all-reduces of up to 8 MiB in one node (gpuperf.perfmodel.comm_custom).
    tp_allreduce: TpAllreduce = "nccl"
    schedule: Schedule = "1f1b"
    virtual_stages: int = 1
    nvls: bool = False
    # Expert parallelism: the busiest rank receives this many times the mean token copies (1:
    # uniform routing; real routers are uneven, and the busiest rank sets the layer's pace).
    moe_imbalance: float = 1.0
    moe_dispatcher: MoeDispatcher = "alltoall"  # MOE_DISPATCHERS
    # Megatron-Core's overlap_moe_expert_parallel_comm (Megatron-Bridge's moe_a2a_overlap): one
    # micro-batch's forward beside the previous one's backward, each side's EP dispatch and
    # combine under the other's compute (gpuperf.step.cost.EP_OVERLAP_HIDDEN).
    ep_overlap: bool = False
    # Training: gradient buffers and their reduction in fp32 (Megatron's grad_reduce_in_fp32,
    # its default in bf16) or in the parameters' dtype (PyTorch's; NVIDIA's performance recipes
    # set grad_reduce_in_fp32=False); auto: fp32 with fused kernels, the parameters' with eager.
    # Under torch.optim (optimizer) the gradients are held in the parameters' dtype and this
    # sets their reduction alone (FSDP2's MixedPrecisionPolicy.reduce_dtype).
    grad_dtype: GradDtype = "auto"
    # Training: the AdamW that steps the parameters. fused: Megatron-Core's (Apex's, Transformer
    # Engine's) fused Adam over an fp32 master copy of 16-bit parameters, m and v in fp32; torch:
    # torch.optim's AdamW (foreach) on the model's own parameters, m and v in their dtype, no
    # master copy (a bf16 model steps in bf16: Hugging Face's Trainer, NeMo AutoModel, whose
    # models are built in bf16), and zero_grad(set_to_none=True) after it; auto: fused with
    # fused kernels, torch with eager or compile.
    optimizer: Optimizer = "auto"

    def __post_init__(self) -> None:
        for name, choices in _CHOICES.items():
            value = getattr(self, name)
            if value not in choices:
                raise InputError(f"unknown {name} {value!r}; expected one of: {', '.join(choices)}")
        for name in _POSITIVE:
            value = getattr(self, name)
            if type(value) is not int or not 0 < value <= MAX_COUNT:  # fast path: a plain int
                _positive_int(name, value)
        for name in _BOOLS:
            if getattr(self, name).__class__ is not bool:
                raise InputError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("sequence_parallel", "dp_overlap"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise InputError(f"{name} must be true, false or None, got {value!r}")
        if self.new_tokens > MAX_NEW_TOKENS:  # generate costs each answer token's context
            raise InputError(f"new_tokens must be at most {MAX_NEW_TOKENS:,} (a 16M-token answer "
                             f"is past any model's context), got {self.new_tokens:,}")  # fmt: skip
        if self.mode == "generate" and (cached := self.seq + self.new_tokens - 1) > MAX_COUNT:
            raise InputError(f"seq + new_tokens - 1 (the longest context a generate caches) must "
                             f"be at most {MAX_COUNT}, got {cached}")  # fmt: skip
        self._check_formats()
        if self.recompute_modules.__class__ is not tuple or self.recompute_modules:
            self._check_recompute_modules()
        imb = self.moe_imbalance
        if isinstance(imb, bool) or not isinstance(imb, int | float) or not 1 <= imb <= 64:
            raise InputError(f"moe_imbalance must be a number from 1 to 64, got {shown(imb)}")
        sp = self.sequence_parallel
        if self.dp_overlap is None and self.mode == "train" and self.dp * self.cp > 1:
            object.__setattr__(self, "dp_overlap", self.pytorch)
        if not isinstance(self.zero, int) or isinstance(self.zero, bool) or self.zero not in (
            0, 1, 2, 3,
        ):  # fmt: skip
            raise InputError(f"zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.global_batch is not None:
            _positive_int("global_batch", self.global_batch)
            if self.mode != "train":
                raise InputError("global_batch applies to training; use batch for inference")
            if self.global_batch % self.dp:
                raise InputError(
                    f"global batch {self.global_batch} is not a multiple of dp={self.dp}"
                )
            per_replica = self.global_batch // self.dp
            if self.batch not in (1, per_replica):
                raise InputError(
                    f"batch={self.batch} and global_batch={self.global_batch} disagree with "
                    f"dp={self.dp} (batch counts sequences per replica); give one of them"
                )
            object.__setattr__(self, "batch", per_replica)
        if self.micro_batch is None:
            object.__setattr__(self, "micro_batch", self.batch)
        _positive_int("micro_batch", self.micro_batch)
        if self.batch % self.micro_batch:
            raise InputError(
                f"batch {self.batch} (per replica) is not a multiple of micro_batch "
                f"{self.micro_batch}"
            )
        if sp is None:
            sp = (self.tp > 1 and self.tp_impl == "megatron" and self.impl == "fused"
                  and (self.mode == "train" or self.etp == 1))  # fmt: skip
            object.__setattr__(self, "sequence_parallel", sp)
        self._check_combinations()

    def _check_recompute_modules(self) -> None:
        mods = self.recompute_modules
        if isinstance(mods, list) and not mods:  # [] as ()
            object.__setattr__(self, "recompute_modules", ())
            return
        if isinstance(mods, str) or not isinstance(mods, tuple | list):
            raise InputError(f"recompute_modules must be a list of module names, got {shown(mods)}")
        for m in mods:
            if m not in RECOMPUTE_MODULES:
                raise InputError(f"unknown recompute module {shown(m)}; expected some of: "
                                 f"{', '.join(RECOMPUTE_MODULES)}")  # fmt: skip
        if self.recompute != "selective":
            raise InputError("recompute_modules choose what selective recomputation redoes: "
                             "they need recompute=selective (--recompute selective)")  # fmt: skip
        if self.impl != "fused":
            raise InputError("recompute_modules are Megatron-Core's (--recompute-modules): fused "
                             "training only; PyTorch recomputes whole layers (--recompute "
                             "full) or by torchtitan's per-op policy (--recompute op)")  # fmt: skip
        ordered = tuple(m for m in RECOMPUTE_MODULES if m in mods)
        object.__setattr__(self, "recompute_modules", ordered)

    @property
    def recompute_plan(self) -> str:
        """What the backward recomputes, as the step's kernels and memory read it: 'none',
        'full', or 'selective:' and its modules ('selective:core_attn' by default; plan_modules
        reads it back)."""
        if self.recompute != "selective":
            return self.recompute
        return "selective:" + ",".join(self.recompute_modules or DEFAULT_RECOMPUTE_MODULES)

    def _check_formats(self) -> None:
        refuse_weight_only(self.dtype)
        if self.kv_dtype in WEIGHT_ONLY:
            raise InputError(f"kv_dtype {self.kv_dtype} is not a cache format (bf16, fp8, ...)")
        if self.weight_dtype is not None:
            if self.weight_dtype not in ("int4", "int8"):
                raise InputError(
                    "weight_dtype must be int4 or int8 (weight-only), "
                    f"got {shown(self.weight_dtype)}"
                )
            if self.dtype not in ("bf16", "fp16"):
                raise InputError(
                    f"weight-only {self.weight_dtype} runs with bf16 or fp16 activations, "
                    f"not {self.dtype}"
                )
            if self.mode == "train":
                raise InputError("weight-only quantization is an inference format (not train)")

    def _check_combinations(self) -> None:
        if self.mode == "train" and self.dtype not in TRAIN_DTYPES:
            raise InputError(f"training runs in {', '.join(TRAIN_DTYPES)}, not {self.dtype} "
                             "(an inference format)")  # fmt: skip
        if self.mode == "train" and self.cuda_graphs:
            raise InputError(
                "CUDA graphs are modelled for inference steps (prefill, decode, generate), "
                "not for training: drop cuda_graphs (--cuda-graphs)"
            )
        if self.fp8_scales == "row" and self.dtype != "fp8":
            raise InputError("fp8_scales=row scales fp8 GEMMs: it needs dtype=fp8 (--dtype fp8)")
        if self.moe_imbalance != 1 and self.ep == 1:
            raise InputError("moe_imbalance skews expert-parallel ranks: it needs ep > 1 (--ep)")
        if self.moe_imbalance > self.ep > 1:  # the busiest rank at most receives every copy
            raise InputError(f"moe_imbalance {self.moe_imbalance:g} exceeds ep={self.ep}: the "
                             "busiest of ep ranks receives at most ep times the mean")  # fmt: skip
        if self.moe_dispatcher != "alltoall":
            self._check_dispatcher()
        if self.ep_overlap:
            self._check_ep_overlap()
        if self.kv_lengths == "seen" and self.mode not in ("decode", "generate"):
            raise InputError("kv_lengths=seen describes decode steps (--mode decode or generate)")
        if self.sequence_parallel and self.tp == 1:
            raise InputError("sequence parallelism needs tp > 1")
        if self.sequence_parallel and self.tp_impl != "megatron":
            raise InputError("sequence parallelism is a megatron TP feature (tp_impl=megatron)")
        if self.impl == "compile" or self.recompute == "op":
            self._check_compile()
        if self.mode == "train" and self.dtype == "fp8" and self.impl == "eager":
            raise InputError("eager fp8 training (torchao's float8 without torch.compile) scales "
                             "each tensor in many unfused kernels, 2.2x slower than compiled on "
                             "an H100 (e2e_compile_train.json), and is not modelled: predict "
                             "--impl compile (torchao under torch.compile) or fused (Transformer "
                             "Engine)")  # fmt: skip
        if self.sequence_parallel and self.impl == "eager":
            raise InputError(
                "sequence parallelism needs fused kernels (Megatron-LM's); the eager Hugging Face "
                "modules run megatron TP without it"
            )
        if self.tp_overlap and (self.tp == 1 or self.tp_impl != "megatron"):
            raise InputError("tp_overlap needs megatron tensor parallelism (tp > 1)")
        if self.tp_overlap and not self.sequence_parallel:
            raise InputError(
                "tp_overlap overlaps sequence parallelism's all-gather and reduce-scatter with the "
                "matmuls (Megatron-LM's tp_comm_overlap): it needs sequence_parallel"
            )
        if self.nvls and self.gpus == 1:
            raise InputError("nvls runs all-reduces between GPUs on NVLink SHARP: it needs a "
                             "plan of more than one GPU (--tp, --dp, --cp, --pp)")  # fmt: skip
        if self.tp_allreduce == "custom" and self.tp == 1:
            raise InputError("tp_allreduce=custom is a tensor-parallel all-reduce: it needs tp > 1")
        if self.tp_allreduce == "custom" and self.tp_impl == "dtensor":
            raise InputError("DTensor's all-reduces are torch.distributed's (NCCL): "
                             "tp_allreduce=custom needs tp_impl=megatron")  # fmt: skip
        if self.schedule == "interleaved" and self.pp == 1:
            raise InputError("the interleaved schedule needs pp > 1")
        if self.virtual_stages > 1 and self.schedule != "interleaved":
            raise InputError("virtual_stages > 1 needs schedule=interleaved")
        if self.tp_impl != "megatron" and self.tp == 1:
            raise InputError(f"tp_impl={self.tp_impl} is a way to run tensor parallelism: it "
                             "needs tp > 1 (--tp)")  # fmt: skip
        if self.dp_overlap is not None and self.mode != "train":
            raise InputError("dp_overlap overlaps the gradient reduction with the backward: "
                             "training only (--mode train)")  # fmt: skip
        if self.dp_overlap is not None and self.dp * self.cp == 1:
            raise InputError("dp_overlap overlaps the gradient reduction with the backward: it "
                             "needs data- or context-parallel ranks (dp·cp > 1)")  # fmt: skip
        if self.kv_dtype is not None and self.mode == "train":
            raise InputError("kv_dtype is the KV cache's format, and a training step keeps no "
                             "cache: drop it (--kv-dtype) or use an inference mode")  # fmt: skip
        if self.mode != "train" and (self.zero or self.recompute != "none"):
            raise InputError("zero and recompute apply to training only")
        if self.mode != "train" and self.grad_dtype != "auto":
            raise InputError("grad_dtype is the gradients' format: training only (--mode train)")
        if self.mode != "train" and self.optimizer != "auto":
            raise InputError("optimizer is the training step's AdamW: training only "
                             "(--mode train)")  # fmt: skip
        if self.optimizer == "fused" and self.pytorch:
            raise InputError("optimizer=fused is Megatron's fused Adam over an fp32 master copy: "
                             "fused kernels only (--impl fused); eager and compile training "
                             "step torch.optim's AdamW (--optimizer torch)")  # fmt: skip
        if self.grad_dtype == "fp32" and self.pytorch:
            raise InputError("eager PyTorch keeps a model's gradients in its parameters' dtype: "
                             "grad_dtype=fp32 needs fused (Megatron-style) training")  # fmt: skip
        if self.zero and self.dp * self.cp == 1:
            raise InputError(
                f"zero={self.zero} shards over data- and context-parallel ranks: it needs dp·cp > 1"
            )
        self._check_etp()
        if self.cp > 1 and self.mode in ("decode", "generate"):
            raise InputError("context parallelism splits a sequence: prefill and train only")
        if self.cp > 1 and self.seq % (2 * self.cp):
            raise InputError(
                f"seq={self.seq} must be a multiple of 2·cp = {2 * self.cp} (ring attention "
                "splits each sequence into 2·cp chunks to balance the causal mask)"
            )

    def _check_compile(self) -> None:
        """torch.compile's layers (impl=compile) and torchtitan's per-op checkpointing
        (recompute=op) as measured: PyTorch-native training (benchmarks/results/*/
        e2e_compile_train.json)."""
        if self.impl == "compile":
            if self.mode != "train":
                raise InputError("impl=compile models training steps with torch.compile'd layers "
                                 "(torchtitan's per-block compile); for inference use fused or "
                                 "eager (--impl)")  # fmt: skip
            for name in ("tp", "cp", "ep"):
                if (n := getattr(self, name)) > 1:
                    raise InputError(f"impl=compile is modelled for data and pipeline "
                                     f"parallelism (DDP, FSDP2, --pp); {name}={n} with compiled "
                                     "layers is not: use --impl eager or fused")  # fmt: skip
        if self.recompute == "op" and self.impl == "fused":
            raise InputError("recompute=op is torchtitan's per-op selective checkpointing of "
                             "PyTorch layers: --impl eager or compile (Megatron's selective "
                             "recompute is --recompute selective)")  # fmt: skip

    def _check_dispatcher(self) -> None:
        name = self.moe_dispatcher
        if self.ep == 1:
            raise InputError(f"moe_dispatcher={name} exchanges tokens between expert-parallel "
                             "ranks: it needs ep > 1 (--ep)")  # fmt: skip
        if self.impl != "fused":
            raise InputError(f"moe_dispatcher={name} runs in Megatron-Core and NeMo AutoModel: "
                             "fused kernels only (--impl fused; Hugging Face's experts send "
                             "every routed copy)")  # fmt: skip
        if self.mode in ("decode", "generate"):
            raise InputError(f"moe_dispatcher={name} models the normal (high-throughput) "
                             "kernels of training and prefill; decode's low-latency kernels "
                             "are not modelled (--mode train or prefill)")  # fmt: skip

    def _check_ep_overlap(self) -> None:
        if self.ep == 1:
            raise InputError("ep_overlap hides expert-parallel dispatch and combine: it needs "
                             "ep > 1 (--ep)")  # fmt: skip
        if self.mode != "train" or self.impl != "fused":
            raise InputError("ep_overlap pairs one micro-batch's forward with another's "
                             "backward in Megatron-Core: fused training only (--mode train "
                             "--impl fused)")  # fmt: skip
        if self.recompute == "full":
            raise InputError("Megatron-Core's EP overlap does not run with full recompute: "
                             "drop ep_overlap or use --recompute selective")  # fmt: skip

    def _check_etp(self) -> None:
        etp = self.expert_tp
        if type(etp) is not int or etp not in (1, self.tp):
            raise InputError(f"etp must be 1 (MoE parallel folding) or tp={self.tp}, got "
                             f"{shown(etp)}")  # fmt: skip
        if etp == self.tp:
            object.__setattr__(self, "etp", None)  # as tp, also after replace(tp=...)
            if self.ep > 1 and self.dp % self.ep:
                raise InputError(
                    f"ep={self.ep} must divide dp={self.dp} (EP groups come from DP; --etp 1 "
                    "folds them over the tensor-parallel ranks too)"
                )
            return
        ranks = self.tp * self.cp * self.dp
        if ranks % self.ep:
            raise InputError(f"ep={self.ep} must divide tp·cp·dp = {ranks} (with --etp 1 the "
                             "expert-parallel groups fold over those ranks)")  # fmt: skip
        if self.impl != "fused":
            raise InputError("etp=1 is Megatron-Core's MoE parallel folding: fused kernels only "
                             "(--impl fused)")  # fmt: skip
        if self.mode in ("decode", "generate"):
            raise InputError("etp=1 (MoE parallel folding) routes each rank's sequence shard: "
                             "prefill and train only")  # fmt: skip
        if self.tp > 1 and not self.sequence_parallel:
            raise InputError("etp=1 with tp > 1 needs sequence parallelism (each rank routes its "
                             "own shard of the tokens)")  # fmt: skip

    # --- derived --------------------------------------------------------------------------------

    @property
    def pytorch(self) -> bool:
        """The step runs in PyTorch's own framework (DDP or FSDP2, torch.optim's AdamW, the
        model's own loss and memory): eager, or with its layers compiled (compile). fused is
        Megatron-style training or a serving engine."""
        return self.impl != "fused"

    @property
    def torch_optim(self) -> bool:
        """The step's AdamW is torch.optim's (states in the parameters' dtype, no master copy,
        zero_grad(set_to_none=True) after it); else Megatron's fused one (Scenario.optimizer)."""
        return self.optimizer == "torch" or (self.optimizer == "auto" and self.pytorch)

    @property
    def expert_tp(self) -> int:
        """Each expert's tensor-parallel degree: etp, or tp where etp is not given."""
        return self.tp if self.etp is None else self.etp

    @property
    def kv(self) -> DType:
        return self.kv_dtype or self.dtype

    @property
    def tokens(self) -> int:
        """Tokens processed by one forward pass of one replica (all its micro-batches)."""
        return self.batch if self.mode == "decode" else self.batch * self.seq

    @property
    def microbatches(self) -> int:
        return self.batch // self.micro_batch  # type: ignore[operator]

    @property
    def gpus(self) -> int:
        """GPUs the plan spans (ep is carved out of dp)."""
        return self.tp * self.pp * self.dp * self.cp

    @property
    def model_parallel(self) -> int:
        """GPUs that hold one replica of the model: tp · pp · cp."""
        return self.tp * self.pp * self.cp

    @property
    def parallel(self) -> bool:
        return self.gpus > 1

    def label(self) -> str:
        """A short name of the plan: 'tp8 pp2 dp4 mb1 zero1 selective sp'."""
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        parts += [f"{k}{getattr(self, k)}" for k in ("cp", "ep") if getattr(self, k) > 1]
        if self.expert_tp != self.tp:
            parts.append(f"etp{self.expert_tp}")
        if self.moe_dispatcher != "alltoall":
            parts.append(self.moe_dispatcher)
        if self.ep_overlap:
            parts.append("ep-overlap")
        if self.moe_imbalance != 1:
            parts.append(f"imb{self.moe_imbalance:g}")
        if self.mode == "train":
            rc = self.recompute
            if self.recompute_modules:
                rc += f"({','.join(self.recompute_modules)})"
            parts += [f"mb{self.micro_batch}", f"zero{self.zero}", rc]
        if self.sequence_parallel:
            parts.append("sp")
        if self.tp_overlap:
            parts.append("tp-overlap")
        if self.dp_overlap is not None and self.dp_overlap != self.pytorch:
            parts.append("dp-overlap" if self.dp_overlap else "no-dp-overlap")  # not the default
        if self.virtual_stages > 1:
            parts.append(f"v{self.virtual_stages}")
        if self.tp > 1 and self.tp_impl != "megatron":
            parts.append(self.tp_impl)
        if self.tp_allreduce != "nccl":
            parts.append(f"{self.tp_allreduce}-ar")
        if self.grad_dtype != "auto":
            parts.append(f"{self.grad_dtype}-grads")
        if self.optimizer != "auto":
            parts.append(f"{self.optimizer}-adam")
        return " ".join(parts)
