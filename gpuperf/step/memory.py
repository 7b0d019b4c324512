"""Device memory of one GPU: weights, KV cache, activations, gradients, optimizer states, and the
parameters FSDP gathers. One model for one GPU and for every plan; one capacity rule.

Inference: weights at the scenario dtype (fp8/int8: every linear layer at 1 byte, embeddings,
lm_head and norms stay 16-bit, as vLLM loads fp8 checkpoints; weight-only int4: half a byte plus
a 16-bit scale and zero per 128 weights); KV cache = 2 (K and V) x layers x kv_heads x head_dim x
tokens x batch x bytes (tokens: seq for prefill, ctx + 1 for decode, seq + new_tokens - 1 for
generate; an MLA layer caches its latent and rotary key, kv_lora_rank + qk_rope_head_dim values
per token; a sliding-window layer its window); activations = the peak transient working set of
one layer (the residual stream and norm output plus the larger of the attention and MLP
intermediates; layers run one after another and free theirs) plus the fp32 logits.

Training (mixed-precision AdamW): 16-bit parameters, gradients as dp_ops.grad_bytes says (fp32
main gradients under Megatron's bf16 training, the parameters' dtype in eager PyTorch, either
where Scenario.grad_dtype says), and the optimizer's states (optimizer_bytes_per_param).
Megatron's distributed-optimizer table (docs/user-guide/features/dist_optimizer.md): bf16
params + fp32 grads 18 | 6 + 12/d bytes per parameter (non-distributed | distributed over d),
16-bit params and grads 20 | 4 + 16/d (the optimizer keeps an fp32 copy of its gradients); ZeRO
(Rajbhandari et al. SC20 §5): stage 1 shards the optimizer, 2 the gradients too, 3 the
parameters too. Activations follow Korthikanti
et al. 2022 §4, generalised to GQA and SwiGLU, with FlashAttention (no s² tensors; it keeps O and
the fp32 log-sum-exp) and no dropout (modern LLM pre-training runs with dropout 0): per layer,
16-bit, bytes =
  2 s b (h + h) [two norm inputs] + 2 s b (h + q + 2 kv + q) [QKV input, Q, K, V, O]
  + 2 s b (h + 2 f + f) [MLP input, gate/up outputs, down input; GELU: h + f + f] + 4 s b a [LSE]
which for MHA, a 4h GELU MLP and dropout masks (dropout=True) is Korthikanti's s b h (34).
fp8 training (Transformer Engine) keeps the QKV, MLP and down-projection inputs in fp8 and an
fp8 copy of O for the output projection: s b (h + h + f - q) bytes fewer.
Materialized attention (attn=math) also keeps the scores and softmax output (Korthikanti's
5 a s² b with dropout; 4 a s² b without) unless selective recomputation drops them. Tensor
parallelism splits all but the norm, QKV and MLP inputs (sequence parallelism splits those too);
context parallelism splits the sequence; full recomputation keeps only each layer's input, and
selective recomputation by module (Megatron-Core's --recompute-modules) drops the outputs of the
modules it runs again (_recomputed_per_token).
A 1F1B pipeline's stage s holds min(m, pp - s) micro-batches in flight (the interleaved schedule
more on the first stage: 1 + (pp-1)/(pp·v) times).

Eager PyTorch training (Hugging Face's modules, torch.optim.AdamW, zero_grad(set_to_none=True))
keeps what autograd saves for those modules (eager_saved_extra: fp32 copies in RMSNorm, a
fourth MLP tensor, math SDPA's fp32 probabilities, a sliding window's mask) and its loss's
buffers (loss_bytes_per_logit: 14 bytes a logit, against 6 for Megatron's fused cross-entropy),
and peaks at one of two moments (_at_the_peak): the backward's start, with every activation and
no gradient but earlier micro-batches', or AdamW's step, with the gradients, the states and
foreach's temporary and no activation; DDP keeps its gradient buckets through both, FSDP2 its
root module through the backward. The breakdown is the larger moment's.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from gpuperf.dtypes import BYTES, DType
from gpuperf.perfmodel.ops import INT4_GROUP
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.scenario import Scenario, plan_modules
from gpuperf.workloads.shard import stage_params
from gpuperf.workloads.transformer_layers import repeats_kv, vocab_shard

if TYPE_CHECKING:
    from gpuperf.hardware.spec import GpuSpec
    from gpuperf.workloads.groups import Groups
    from gpuperf.workloads.shard import Params, Stage

KEYS = ("weights", "kv_cache", "activations", "gradients", "optimizer", "gathered")
# The share of HBM a framework can fill: the CUDA context, NCCL's buffers and the caching
# allocator's fragmentation take the rest (vLLM's default gpu_memory_utilization is 0.90).
HBM_USABLE = 0.92


def usable_bytes(gpu: GpuSpec) -> float:
    """The one capacity rule: what a run may use of the GPU's memory."""
    return gpu.hbm_bytes * HBM_USABLE


def _act_dtype(sc: Scenario) -> DType:
    return "bf16" if BYTES[sc.dtype] == 1 else sc.dtype


def weight_bytes(cfg: ModelConfig, dtype: DType, weight_dtype: DType | None = None) -> float:
    """Weights at `dtype`; 1-byte dtypes quantize the linear layers only, as do the weight-only
    formats (int4 with its group scales and zeros, int8 with a scale per output channel)."""
    if BYTES[dtype] > 1 and weight_dtype is None:
        return float(cfg.param_count() * BYTES[dtype])
    parts = cfg.param_breakdown()
    linear = sum(parts[k] for k in ("attn", "mlp", "dense_mlp", "shared_expert", "moe_latent",
                                    "mamba"))  # fmt: skip
    if weight_dtype == "int4":
        per = 0.5 + 2 * 2 / INT4_GROUP
    elif weight_dtype == "int8":
        per = 1.0
    else:
        per = float(BYTES[dtype])
    rest = BYTES[dtype] if BYTES[dtype] > 1 else 2
    return float(linear * per + (cfg.param_count() - linear) * rest)


def kv_share(cfg: ModelConfig, tp: int) -> float:
    """The share of the KV cache one of `tp` GPUs holds: KV heads are split over the ranks (or
    replicated when fewer than them); an MLA latent is replicated on every rank."""
    return 1.0 if cfg.is_mla else max(1, cfg.kv_heads // tp) / cfg.kv_heads


def kv_cache_bytes(cfg: ModelConfig, tokens: int, batch: int, dtype: DType) -> float:
    """The cache for `tokens` positions of `batch` sequences, all layers: K and V per KV head,
    or an MLA layer's latent and rotary key; a sliding-window layer keeps its window alone."""
    mla = cfg.kv_lora_rank + cfg.qk_rope_head_dim
    per_layer = mla if cfg.is_mla else 2 * cfg.kv_heads * cfg.hd
    # A Mamba-2 layer keeps a fixed state per sequence instead (the SSM state and the
    # convolution's window), whatever the length.
    state = cfg.blocks("M") * cfg.mamba_state_numel
    return float((per_layer * cfg.attended_positions(tokens) + state) * batch * BYTES[dtype])


@functools.lru_cache(maxsize=1024)
def train_activation_bytes_per_layer(
    cfg: ModelConfig, batch: int, seq: int, dtype: DType = "bf16", dropout: bool = False,
    fp8_inputs: bool = False,
) -> float:  # fmt: skip
    """Bytes a layer keeps for backward (module docstring); dropout adds 1-byte masks.
    fp8_inputs: Transformer Engine's fp8 training keeps each GEMM's input, for its weight
    gradient, in fp8: the QKV and MLP inputs and the down projection's at 1 byte, and the
    output projection's as an fp8 copy beside the 16-bit O the attention backward reads."""
    sb, b = seq * batch, BYTES[dtype]
    h, q, kv, f = cfg.hidden, cfg.heads * cfg.hd, cfg.kv_heads * cfg.hd, cfg.intermediate
    if cfg.layer_pattern:
        return float(b * sb * _hybrid_saved_per_token(cfg))
    norms = 2 * h
    attn = h + q + 2 * kv + q
    if cfg.is_moe:  # each token's hidden copies and expert intermediates, k times
        k, fe = cfg.num_experts_per_tok, cfg.expert_intermediate
        mlp = h + k * (h + 3 * fe) + cfg.num_experts + 3 * cfg.shared_intermediate_size
    else:
        mlp = h + (3 * f if cfg.mlp == "gated" else 2 * f)
    total = b * sb * (norms + attn + mlp) + 4 * sb * cfg.heads
    if fp8_inputs and b == 2:  # 16-bit activations, fp8 GEMMs
        if cfg.is_moe:
            k, fe = cfg.num_experts_per_tok, cfg.expert_intermediate
            down = k * (h + fe) + cfg.shared_intermediate_size
        else:
            down = h + f  # the MLP's input and its down projection's
        total += sb * (q - h - down)
    if dropout:  # attention-output and MLP-output dropout masks (Korthikanti: sbh each)
        total += 2 * sb * h
    return float(total)


def _hybrid_saved_per_token(cfg: ModelConfig) -> float:
    """Values a hybrid's layer keeps per token for backward, the mean over its layers: each
    block's input to its norm and what the block saves (Mamba-2: the in_proj output z, x, B, C,
    dt and the scan's output, as mamba_split_conv1d_scan_combined saves them; attention: q, k, v
    and the output, with the fp32 log-sum-exp per head; an MLP its up projection and activation;
    an MoE block its k token copies, each expert's up projection and activation)."""
    saved = _hybrid_saved_by_block(cfg)
    return sum(saved[c] for c in cfg.layer_pattern) / cfg.layers


def _hybrid_saved_by_block(cfg: ModelConfig) -> dict[str, float]:
    """Values per token each kind of hybrid block keeps (_hybrid_saved_per_token)."""
    h = cfg.hidden
    q, kv = cfg.heads * cfg.hd, cfg.kv_heads * cfg.hd
    mlp = 3 if cfg.mlp == "gated" else 2
    k, fe, w = cfg.num_experts_per_tok, cfg.expert_intermediate, cfg.moe_latent_size or h
    return {
        "M": h + cfg.mamba_inner + cfg.mamba_conv_dim + cfg.mamba_heads + cfg.mamba_inner,
        "*": h + 2 * q + 2 * kv + 2 * cfg.heads,
        "-": h + mlp * cfg.intermediate,
        "E": h
        + k * (w + mlp * fe)
        + cfg.num_experts
        + mlp * cfg.shared_intermediate_size
        + (h if cfg.moe_latent_size else 0),
    }


def _saved_per_layer(cfg: ModelConfig, b: int, seq: int, cp: int, tp: int, sp: bool, act: DType,
                     attn: str, recompute: str, fp8: bool = False, eager: bool = False,
                     compiled: bool = False) -> float:  # fmt: skip
    """Bytes one layer keeps for backward for one micro-batch of `b` sequences of `seq` tokens
    on one GPU (fp8: the GEMMs' inputs kept in fp8; eager: Hugging Face's modules, which keep
    more: eager_saved_extra; compiled: those modules compiled, compiled_saved_extra)."""
    s = seq // cp
    h = cfg.hidden
    if recompute == "full":  # only the layer's input (sequence-parallel: its shard)
        return BYTES[act] * b * s * h / (tp if sp else 1)
    if recompute == "op":  # the input, the kept matmul outputs, the attention's output and LSE
        from gpuperf.workloads.transformer_train import op_policy_split

        kept = op_policy_split(cfg)[0]
        # under tensor parallelism (no sequence parallelism in PyTorch layers) the input and the
        # row-parallel outputs (o, down: all-reduced) are whole on every rank, the rest split
        whole = h + sum(out for name, _, out in kept if name in ("attn/out", "mlp/down"))
        split = sum(out for name, _, out in kept if name not in ("attn/out", "mlp/down"))
        split_b = BYTES[act] * (split + cfg.heads * cfg.hd) + 4 * cfg.heads
        return b * s * (BYTES[act] * whole + split_b / tp)
    full = train_activation_bytes_per_layer(cfg, b, s, act, dropout=cfg.hidden_dropout > 0,
                                            fp8_inputs=fp8)  # fmt: skip
    if eager:
        full += b * s * eager_saved_extra(cfg, act, s)
    elif compiled:
        full += b * s * compiled_saved_extra(cfg, act, s)
    modules = plan_modules(recompute)
    norms, rest = _recomputed_per_token(cfg, modules, act, fp8) if modules else (0.0, 0.0)
    full -= (norms + rest) * b * s
    if attn == "math" and "core_attn" not in modules:
        # scores and softmax output, 16-bit each, and with attention dropout its 1-byte mask
        full += (5 if cfg.attention_dropout > 0 else 4) * cfg.heads * s * s * b
    if sp:
        return full / tp
    # two norm inputs, QKV input, MLP input (the GEMMs' inputs in fp8 under fp8 training)
    replicated = BYTES[act] * b * s * 2 * h + (1 if fp8 else BYTES[act]) * b * s * 2 * h
    # the recomputed norms' outputs were among the GEMM inputs kept whole on every rank
    replicated -= min(norms, (1 if fp8 else BYTES[act]) * 2 * h) * b * s
    if eager or compiled:  # a mask and parallel norms' input are whole on every rank too
        replicated += b * s * _whole_on_every_rank(cfg, BYTES[act], s)
    return replicated + (full - replicated) / tp


def eager_saved_extra(cfg: ModelConfig, act: DType, seq: int) -> float:
    """Bytes per token a Hugging Face layer's eager modules keep for backward beyond the fused
    count of train_activation_bytes_per_layer (the mean over layers), from what PyTorch's
    autograd saves for each of their operations (checked with saved_tensors_hooks on small
    models: tests/unit/test_eager_saved.py):
    - an RMSNorm before a block (x.float(), pow, mean, rsqrt, mul, the cast back, the weight's
      mul) keeps its fp32 input (pow's and mul's) and the tensor the weight multiplies (Llama's
      16-bit cast, or Gemma's and OLMo-2's fp32 normalized value, which cast after it) beside
      the next GEMM's input the fused count has, in place of the norm's input, which nothing
      keeps; a norm after a block (Gemma's sandwich, OLMo-2's only ones) feeds the residual
      add, which keeps nothing, so all it keeps is extra, and without norms before the blocks
      (OLMo-2) the fused count's two norm inputs are kept by nothing; per-head q/k norms keep
      their fp32 input and what the weight multiplies; LayerNorm keeps its input as the fused
      count says; one norm shared by parallel attention and MLP (Falcon-7B) is one norm input
      and one GEMM input where the fused count has two of each;
    - a gated MLP keeps four tensors of its width (gate and up outputs, the activation's, the
      product the down projection reads), the fused count three; GPT-2's GELU written in
      Python keeps tanh's output, 0.5·x and 1 + tanh beside its input and its product;
    - PyTorch's math SDPA (Falcon-7B's multi-query attention, in fp32) keeps the fp32
      probabilities of every (query, key) pair (_safe_softmax's output, which P·V reads too)
      and the fp32 q, k and v of its products (k and v stay stride-0 views of the shared
      head), in place of the fused kernel's 16-bit q, k, v and log-sum-exp;
    - a sliding-window layer whose keys reach its window (HF skips the mask below it) hands
      SDPA a mask, which SDPA keeps as a 16-bit additive bias of every (query, key) pair, and K
      and V repeated to every query head (repeat_kv: SDPA's GQA is used only without a mask);
    - the grouped_mm experts keep, per routed copy, the gathered token and the masked down
      output besides the fused count's expert intermediates, and a fourth of their width
      (the gate/up output is kept whole through its masked copy).
    SDPA's fused kernels return their output in the query's layout, so o_proj reads (and
    keeps) that tensor itself. Hybrids (Mamba-2) run fused only: 0."""
    if cfg.layer_pattern:
        return 0.0
    e = BYTES[act]
    h, q, kv, f = cfg.hidden, cfg.heads * cfg.hd, cfg.kv_heads * cfg.hd, cfg.intermediate
    rms = cfg.norm == "rmsnorm"
    scaled = e if not (cfg.norm_weight_fp32 or cfg.norm_scale_fp32) else 4
    extra = 0.0
    if cfg.pre_norm:
        if rms:  # fp32 input and the scaled tensor, for the unkept norm input
            extra += (1 if cfg.shared_input_norm else 2) * h * (4 + scaled - e)
        if cfg.shared_input_norm:  # the second norm input and GEMM input are the first's
            extra -= 2 * e * h
    else:
        extra -= 2 * e * h
    post = 2 if cfg.sandwich_norm or not cfg.pre_norm else 0
    extra += post * h * ((4 + scaled) if rms else e)
    if rms and (cfg.qk_norm or cfg.qk_norm_full):
        extra += (q + kv) * (4 + scaled)
    if cfg.is_moe:
        k, fe = cfg.num_experts_per_tok, cfg.expert_intermediate
        share = cfg.moe_layers / cfg.layers
        extra += share * k * e * (h + fe)
        dense = 1 - share
    else:
        dense = 1.0
    if cfg.mlp == "gated":
        extra += dense * e * f
    elif cfg.hidden_act == "gelu_new":
        extra += dense * 3 * e * f
    if cfg.sdpa_math:
        extra += 4 * cfg.heads * seq + 4 * q + 8 * kv - e * (q + 2 * kv) - 4 * cfg.heads
    else:
        extra += _module_saved_extra(cfg, e, seq)
        if _view_of_projection(cfg):
            # q rotated from a slice of the projection is laid out head-major, so SDPA's output
            # is too, and o_proj reads a contiguous copy of it: both kept
            extra += e * q
    return float(extra)


def _view_of_projection(cfg: ModelConfig) -> bool:
    """Whether V is a view of one q/k/v projection's output whose q and k are rotated into new
    tensors (Phi-3's qkv_proj, GPT-NeoX's query_key_value; not Falcon's new decoder, which picks
    K and V out by a list index, copies; not GPT-2's c_attn, whose q, k and v stay views)."""
    return cfg.qkv_fused and cfg.positions == "rope" and not cfg.kv_list_index


def _masked_share(cfg: ModelConfig, seq: int) -> float:
    """The share of layers that hand SDPA a mask at `seq` tokens: Falcon's causal mask, or a
    sliding layer's past its window."""
    if cfg.sdpa_mask:
        return 1.0
    if cfg.sliding_layers and seq >= cfg.sliding_window:
        return len(cfg.sliding_layers) / cfg.layers
    return 0.0


def _whole_on_every_rank(cfg: ModelConfig, e: int, seq: int) -> float:
    """Of _module_saved_extra, the bytes per token that tensor parallelism does not split: the
    mask (one [b, 1, s, s] bias whatever the heads) and the one input of two parallel norms
    (0 where the layer runs math SDPA or is a hybrid's: neither count takes these terms)."""
    if cfg.sdpa_math or cfg.layer_pattern:
        return 0.0
    whole = e * _masked_share(cfg, seq) * seq
    if cfg.parallel_residual and not cfg.shared_input_norm:
        whole -= e * cfg.hidden
    return whole


def _module_saved_extra(cfg: ModelConfig, e: int, seq: int) -> float:
    """Bytes per token (the mean over layers) that a Hugging Face layer's module code makes its
    backward keep beyond the fused count, eager or compiled alike (no fusion removes them;
    measured by benchmarks/device/saved_memory_probe.py, saved_memory.json and
    saved_memory_layouts.json):
    - a mask handed to SDPA (a sliding layer past its window; Falcon's causal mask, where
      is_causal would do): SDPA keeps it as a 16-bit additive bias of every (query, key) pair,
      and K and V reach it repeated to every query head (repeat_kv; Falcon's new decoder picks
      them out of its projection for every query head itself, mask or not);
    - one q/k/v projection whose q and k are rotated (_view_of_projection): V keeps the whole
      output alive, its q and k parts beside the rotated copies;
    - parallel attention and MLP with a norm each (GPT-NeoX, Falcon's new decoder): both norms
      read the layer's input, one tensor where the fused count has two norm inputs."""
    q, kv = cfg.heads * cfg.hd, cfg.kv_heads * cfg.hd
    repeated = 1.0 if cfg.kv_list_index else _masked_share(cfg, seq)
    extra = _whole_on_every_rank(cfg, e, seq) + e * repeated * 2 * (q - kv)
    if _view_of_projection(cfg):
        extra += e * (q + kv)
    return extra


def compiled_saved_extra(cfg: ModelConfig, act: DType, seq: int) -> float:
    """Bytes per token a Hugging Face layer compiled whole (impl=compile: Inductor partitions
    forward and backward by min-cut, rebuilding cheap pointwise results rather than keeping
    them) keeps beyond the fused count of train_activation_bytes_per_layer, the mean over
    layers, as benchmarks/device/saved_memory_probe.py found on an H100 (saved_memory.json:
    Mistral-7B, StarCoder2-7B and Gemma-3-4B at 8K tokens, Phi-3-mini at 4K, to 1 MiB a layer;
    saved_memory_layouts.json: small Falcon, GPT-NeoX and part-rotary Phi-3 layers):
    - what the module code makes any backward keep (_module_saved_extra: a mask handed to SDPA
      and K/V repeated for it, a rotated q/k/v projection's whole output, one input for two
      parallel norms), and o_proj's contiguous copy of SDPA's output where q is part-rotated;
    - q/k norms (Qwen3, Gemma-3 per head; OLMo-2 over the projection): their inputs, the q and
      k projections' outputs, 16-bit;
    - norms after the blocks as well as before (Gemma-2/3): the attention and MLP outputs are
      the post-norms' inputs, kept, and the residual between the blocks is rebuilt from them:
      one more hidden-width tensor than the fused count's. Hybrids (Mamba-2) run fused only: 0."""
    if cfg.layer_pattern or cfg.sdpa_math:
        return 0.0
    e = BYTES[act]
    extra = _module_saved_extra(cfg, e, seq)
    if _view_of_projection(cfg) and cfg.rotary_frac < 1:
        # a part-rotated q is put back together by a cat, head-major: o_proj's input is a
        # contiguous copy of SDPA's output, as in eager (a wholly rotated q Inductor lays out)
        extra += e * cfg.heads * cfg.hd
    if cfg.qk_norm or cfg.qk_norm_full:
        extra += e * (cfg.heads + cfg.kv_heads) * cfg.hd
    if cfg.sandwich_norm and cfg.pre_norm:
        extra += e * cfg.hidden
    return float(extra)


def _recomputed_per_token(cfg: ModelConfig, modules: frozenset[str], act: DType,
                          fp8: bool) -> tuple[float, float]:  # fmt: skip
    """Bytes per token, the mean over layers, that the recomputed modules no longer keep for
    the backward (their outputs; a module's input stays, kept by what made it): the
    stand-alone norms' outputs (replicated over tensor-parallel ranks without sequence
    parallelism), and the rest. fp8: the GEMMs' inputs kept in fp8, as
    train_activation_bytes_per_layer counts them."""
    e, g = BYTES[act], (1 if fp8 else BYTES[act])  # 16-bit values, a GEMM's fp8 input
    h, k, fe = cfg.hidden, cfg.num_experts_per_tok, cfg.expert_intermediate
    sh, mlp = cfg.shared_intermediate_size, (3 if cfg.mlp == "gated" else 2)
    if cfg.layer_pattern:  # a hybrid counts no norm outputs; a block keeps its input
        saved = _hybrid_saved_by_block(cfg)
        moe_blocks = cfg.layer_pattern.count("E") / cfg.layers
        dense = cfg.layer_pattern.count("-") / cfg.layers
        rest = 0.0
        if "moe" in modules:
            rest += moe_blocks * (saved["E"] - h)
        else:
            rest += moe_blocks * ((k * fe if "moe_act" in modules else 0)
                                  + (mlp * sh if "shared_experts" in modules else 0))  # fmt: skip
        if "mlp" in modules:
            rest += dense * (saved["-"] - h)
        return 0.0, rest * e
    norms, rest = 0.0, 0.0
    share = cfg.moe_layers / cfg.layers if cfg.is_moe else 0.0  # of the layers, MoE blocks
    if "layernorm" in modules:  # stand-alone norms: before an MoE block, before MLA
        norms += share * e * h + (g * h if cfg.is_mla else 0)
    if "moe" in modules:  # keeps the block's input (its norm's output, above)
        moe = e * (k * (h + 3 * fe) + cfg.num_experts + 3 * sh) - (e - g) * (k * (h + fe) + sh)
        rest += share * moe  # less the experts' and shared experts' fp8 inputs
    else:
        act_out = g * k * fe if "moe_act" in modules else 0
        rest += share * (act_out + ((2 * e + g) * sh if "shared_experts" in modules else 0))
    if "mlp" in modules:  # the dense MLPs, from the residual (the norm fused into fc1)
        f = cfg.intermediate
        norms += (1 - share) * g * h
        rest += (1 - share) * (e * mlp * f - (e - g) * f)  # the down projection's fp8 input
    if "mla_up_proj" in modules and cfg.is_mla:  # q, k and v as the layer counts them
        rest += e * cfg.heads * cfg.hd + 2 * e * cfg.kv_heads * cfg.hd
    return norms, rest


def inference_activation_bytes(cfg: ModelConfig, sc: Scenario) -> float:
    """Peak transient working set of one layer plus the fp32 logits of this pass (one GPU's
    share: heads, MLP width and vocabulary split tp ways, tokens cp ways)."""
    b = BYTES[_act_dtype(sc)]
    mb = sc.micro_batch or sc.batch
    T = mb if sc.mode == "decode" else mb * sc.seq // sc.cp
    tp = sc.tp
    h, q, kv, f = cfg.hidden, cfg.heads * cfg.hd, cfg.kv_heads * cfg.hd, cfg.intermediate
    attn = (q + 2 * kv + q) / tp  # QKV output and attention output live together
    if cfg.is_moe:  # permuted tokens, gate_up output, activation output, k copies each
        k, fe = cfg.num_experts_per_tok, cfg.expert_intermediate
        mlp = k * (h + 3 * fe / tp) + 3 * cfg.shared_intermediate_size / tp
    else:
        mlp = (3 * f if cfg.mlp == "gated" else 2 * f) / tp
    keys = sc.ctx + 1 if sc.mode == "decode" else sc.seq
    if cfg.sdpa_math and sc.impl == "eager" and sc.cp == 1 and sc.attn == "flash":
        # the Hugging Face module runs PyTorch's math SDPA (transformer_layers.sdpa_math_fp32):
        # fp32 scores and probabilities of every (query, key) pair, per head (in elements of b)
        attn += 8 / b * cfg.heads / tp * keys
    elif sc.attn == "math":  # each query's scores and probabilities over every key, per head
        attn += 2 * cfg.heads / tp * keys
    work = max(attn, mlp)
    if sc.impl == "eager":
        if (
            sc.mode == "decode"
            and sc.cuda_graphs
            and not cfg.kv_broadcast
            and repeats_kv(cfg.heads // tp, max(1, cfg.kv_heads // tp))
        ):  # a rank's heads
            # a StaticCache step hands SDPA a mask, so Hugging Face repeats the whole cache's K
            # and V to every query head first (transformer_layers.static_cache_attention); a
            # model whose every layer slides caches its window alone
            every = cfg.sliding_window and len(set(cfg.sliding_layers)) == cfg.layers
            attn += 2 * cfg.heads / tp * (min(keys, cfg.sliding_window) if every else keys) * cfg.hd
        # Hugging Face's module code keeps two more hidden-width tensors through a layer: the
        # model's forward holds its input embeddings (`inputs_embeds`), and its decoder loop
        # the layer's input (`hidden_states = decoder_layer(hidden_states, ...)`), which is the
        # residual in the attention but not in the MLP, after the layer made its new residual
        # sum (measured, e2e_batched.json: prefills of 131K-524K tokens held two such tensors
        # more than counted, 2.0-4.2 GiB)
        if cfg.gate_up_fused and not cfg.is_moe:
            # Phi-3's MLP chunks one gate_up output (2f) into views, which keep it alive beside
            # the activation's output and the product
            mlp += f / tp
        work = max(attn + h, mlp + 2 * h)
    rows = mb if sc.mode in ("prefill", "generate") else T
    return float(b * T * (2 * h + work)
                 + 4 * rows * vocab_shard(cfg.vocab, _logits_tp(sc), sc.impl, False))  # fmt: skip


def optimizer_bytes_per_param(param_bytes: int, torch_optim: bool, grad_bytes: int = 4) -> int:
    """AdamW state per parameter, as gpuperf's training op lists step it (Scenario.optimizer).

    torch (torch.optim.AdamW on the model's own parameters): m and v in the parameters' dtype.
    fused (mixed precision, Megatron-style): an fp32 master copy when the parameters are narrower
    than fp32, and m and v at least in fp32 (fp64 for an fp64 model); with 16-bit gradients,
    also the fp32 copy of the gradients it steps (Megatron's distributed-optimizer table: 16-bit
    parameters and gradients, 4 + 16/d bytes a parameter).
    """
    if torch_optim:
        return 2 * param_bytes
    master = 4 if param_bytes < 4 else 0
    main_grad = 4 if grad_bytes < 4 and param_bytes < 4 else 0
    return master + main_grad + 2 * max(4, param_bytes)


def stage_memory(cfg: ModelConfig, sc: Scenario, g: Groups, stage: Stage, p: Params,
                 plan: tuple | None = None) -> dict[str, float]:  # fmt: skip
    """Bytes by kind on one GPU of pipeline stage `stage`, which holds parameters `p`, on GPUs
    of groups `g` (module docstring); `plan`: the terms every stage of `sc` shares
    (_plan_terms), where the caller has them."""
    out = dict.fromkeys(KEYS, 0.0)
    if sc.mode != "train":
        scale = weight_bytes(cfg, sc.dtype, sc.weight_dtype) / cfg.param_count()
        out["weights"] = p.total * scale
        # generate: the prompt and every answer token but the last (never fed back)
        tokens = {"prefill": sc.seq, "decode": sc.ctx + 1,
                  "generate": sc.seq + sc.new_tokens - 1}  # fmt: skip
        out["kv_cache"] = (kv_cache_bytes(cfg, tokens[sc.mode] // sc.cp, sc.batch, sc.kv)
                           * kv_share(cfg, sc.tp) * (stage.layers / cfg.layers))  # fmt: skip
        out["activations"] = inference_activation_bytes(cfg, sc)
        return out
    pb, gb, ob, saved, rebuilt, head = plan or _plan_terms(cfg, sc)
    zero = sc.zero
    split = p.dense / g.dp + p.expert / g.edp  # parameters split over the data-parallel ranks
    out["weights"] = (split if zero >= 3 else p.total) * pb
    out["gradients"] = (split if zero >= 2 else p.total) * gb
    out["optimizer"] = (split if zero >= 1 else p.total) * ob
    if zero == 3:  # the layer running and the one prefetched, with the running one's grads
        # (of what is sharded: experts whose data-parallel group is one rank are not gathered)
        layer = (p.layer_dense if g.dp > 1 else 0.0) + (p.layer_expert if g.edp > 1 else 0.0)
        out["gathered"] = layer * (2 * pb + gb)
        # FSDP2 keeps the root module (embedding, final norm, lm_head) gathered from the
        # forward through the backward (fully_shard's root does not reshard after forward)
        out["gathered"] += p.ends * pb
    inflight = min(sc.microbatches, sc.pp - stage.index)
    if sc.virtual_stages > 1 and stage.index == 0:
        inflight *= 1 + (sc.pp - 1) / (sc.pp * sc.virtual_stages)
    # the loss's buffers are freed before any layer's backward rebuilds a layer
    out["activations"] = saved * stage.layers * inflight + max(
        rebuilt, head if stage.has_head else 0.0
    )
    if sc.torch_optim:  # PyTorch DDP (its reducer's buckets): dp·cp ranks without ZeRO
        _at_the_peak(out, sc.pytorch and zero == 0 and g.dp > 1, sc.microbatches > 1)
    return out


def _at_the_peak(out: dict[str, float], ddp_buckets: bool, accumulates: bool) -> None:
    """Eager PyTorch training steps torch.optim.AdamW (foreach) and zero_grad(set_to_none=True)
    after it, so its peak is one of two moments, and `out` becomes the larger one's memory:
    the start of the backward (every activation, the loss's buffers, FSDP's gathered layers;
    no gradient yet, unless earlier micro-batches of the step accumulated them) or AdamW's step
    (the gradients, m and v, and foreach's one temporary the size of the parameters it steps,
    its sqrt of v; the activations are gone and FSDP has resharded). DDP's reducer keeps its
    gradient buckets, a copy of the gradients, through both."""
    grads = out["gradients"]
    buckets = grads if ddp_buckets else 0.0
    temporary = out["optimizer"] / 2  # m and v in the parameters' dtype: one more of them
    kept = grads if accumulates else 0.0  # at the backward's start
    if out["activations"] + out["gathered"] + kept >= grads + temporary:
        out["gradients"] = kept + buckets
    else:
        out["activations"] = out["gathered"] = 0.0
        out["gradients"] = grads + buckets
        out["optimizer"] += temporary


def _plan_terms(cfg: ModelConfig, sc: Scenario) -> tuple[int, int, int, float, float, float]:
    """What every stage of a training plan shares: bytes per parameter of weights, gradients
    and optimizer state, a layer's saved activations, the working set one layer's backward
    rebuilds (full recompute's layer, math SDPA's fp32 score gradients; 0 otherwise), the
    loss's buffers (its stage only)."""
    return _shared_terms(cfg, _act_dtype(sc), sc.impl, sc.recompute_plan,
                         sc.micro_batch or sc.batch, sc.seq, sc.cp, sc.tp,
                         bool(sc.sequence_parallel), sc.attn, sc.grad_dtype,
                         BYTES[sc.dtype] == 1, _logits_tp(sc), sc.torch_optim)  # fmt: skip


def _logits_tp(sc: Scenario) -> int:
    """Ways the logits are split: DTensor's lm_head (colwise_rep) gathers them whole on every
    rank; Megatron keeps its vocabulary shard."""
    return 1 if sc.tp_impl == "dtensor" else sc.tp


@functools.lru_cache(maxsize=4096)
def _shared_terms(cfg: ModelConfig, act: DType, impl: str, recompute: str, b: int, seq: int,
                  cp: int, tp: int, sp: bool, attn: str, grad_dtype: str,
                  fp8: bool, logits_tp: int, torch_optim: bool) -> tuple:  # fmt: skip
    """_plan_terms from the fields it reads (plans of a search share them); fp8: the GEMMs
    run in fp8 (Transformer Engine keeps their inputs in fp8). PyTorch's framework (eager or
    compile) sets the gradients, optimizer and loss; the layers' kernels (eager modules, or
    fused ones when compiled) what a layer saves."""
    from gpuperf.workloads.dp_ops import grad_bytes

    eager = impl != "fused"
    modules = impl == "eager"  # Hugging Face's eager modules, and what they save
    compiled = impl == "compile"  # those modules compiled
    pb = BYTES[act]
    # torch.optim steps .grad, which autograd keeps in the parameters' dtype (FSDP2 casts the
    # reduced shard back to it); grad_dtype then sets only the reduction (dp_ops.grad_bytes)
    gb = pb if torch_optim else grad_bytes(act, eager, grad_dtype)
    rebuilt = 0.0
    if recompute in ("full", "op"):  # a layer's backward rebuilds what it did not keep
        rebuilt = _saved_per_layer(cfg, b, seq, cp, tp, sp, act, attn, "none", fp8, modules,
                                   compiled)  # fmt: skip
        if recompute == "op":
            rebuilt -= _saved_per_layer(cfg, b, seq, cp, tp, sp, act, attn, "op", fp8, modules)
    if modules and cfg.sdpa_math:
        # a layer's backward holds three fp32 (query, key) tensors at once beside the saved P
        # (sdpa_math_fp32's backward on CUDA: P's gradient, _safe_softmax's and the scores';
        # measured on an H100, saved_memory_falcon.json: its peak 3.2 such tensors above the
        # forward's end, where two had been counted)
        s = seq // cp
        rebuilt += 12 * cfg.heads / tp * s * s * b
    per_logit = loss_bytes_per_logit(cfg, act, eager)
    head = (
        b
        * seq
        // cp
        * vocab_shard(cfg.vocab, logits_tp, "eager" if eager else "fused", True)
        * per_logit
    )
    return (pb, gb, optimizer_bytes_per_param(pb, torch_optim, gb),
            _saved_per_layer(cfg, b, seq, cp, tp, sp, act, attn, recompute, fp8, modules,
                             compiled),
            rebuilt,
            float(head))  # fmt: skip


def loss_bytes_per_logit(cfg: ModelConfig, act: DType, eager: bool) -> int:
    """Bytes per logit alive at the loss's peak. Fused (Megatron's vocab-parallel cross-entropy):
    the logits and the fp32 softmax it keeps and turns into the gradient in place. Eager
    (Hugging Face's ForCausalLMLoss: logits.float(), then cross_entropy = log_softmax + nll):
    at the start of the backward the 16-bit logits (the model's output holds them),
    log_softmax's fp32 output (saved), nll's fp32 gradient and log_softmax's, all at once. A
    final softcap keeps its tanh's output."""
    pb = BYTES[act]
    up = 4 if act != "fp32" else 0  # the fp32 copy (none when the model runs in fp32)
    return pb + (3 * 4 if eager else up) + (pb if cfg.final_softcap else 0)


def memory_breakdown(cfg: ModelConfig, sc: Scenario) -> dict[str, float]:
    """Bytes by kind on the busiest GPU of `sc` (one GPU when every degree is 1)."""
    from gpuperf.workloads.groups import groups_for

    return busiest(cfg, sc, groups_for(sc, None))


def busiest(cfg: ModelConfig, sc: Scenario, g: Groups) -> dict[str, float]:
    """The memory of the stage of `sc` on GPUs of groups `g` that needs the most. It reads the
    stages' parameters alone, not the step's work: a plan search refuses a plan that does not
    fit before it builds its kernels."""
    plan = _plan_terms(cfg, sc) if sc.mode == "train" else None
    per_stage = [stage_memory(cfg, sc, g, st, p, plan)
                 for st, p in stage_params(cfg, sc.pp, g.tp, g.ep, g.etp, g.tp_impl)]  # fmt: skip
    if len(per_stage) == 1:
        return per_stage[0]
    return max(per_stage, key=lambda m: sum(m.values()))


def total_bytes(breakdown: dict[str, float]) -> float:
    return math.fsum(breakdown.get(k, 0.0) for k in KEYS)


def over(breakdown: dict[str, float], capacity: float) -> str:
    """What a breakdown that does not fit needs, beside the capacity, and its largest term:
    'needs 90.1 GiB per GPU of 73.6 GiB usable; weights alone is 60.0 GiB (weights 60.0 GiB,
    ...)'."""
    from gpuperf.units import fmt_bytes

    terms = sorted(((v, k) for k, v in breakdown.items() if v), reverse=True)
    parts = ", ".join(f"{k} {fmt_bytes(v)}" for v, k in terms)
    return (f"needs {fmt_bytes(total_bytes(breakdown))} per GPU of {fmt_bytes(capacity)} usable; "
            f"{terms[0][1]} alone is {fmt_bytes(terms[0][0])} ({parts})")  # fmt: skip


def measured_window_bytes(p: Any, prefill: Any = None) -> float:
    """The bytes a measured run's peak covers, from prediction `p`'s memory: prefill runs keep no
    cache (benchmarks/device/e2e_hf.py's and gpuperf.measure.model_worker's run
    use_cache=False: the step's memory less its KV cache); e2e_hf.py's decode runs build their
    cache by a prefill of batch x ctx tokens inside the measured window (the larger of that
    prefill, `prefill`, and the decode step; model_worker's build it before the window, and
    its CUDA-graph decodes start the window after the capture: the replays allocate nothing, and
    the step's working set sits in the graph's pool, reserved but not allocated: weights and
    cache alone; its runs before 2026-11-25 freed the cache as the capture returned, so their
    windows held the weights alone)."""
    if p.scenario.get("mode") == "prefill":
        return sum(p.memory.values()) - p.memory.get("kv_cache", 0.0)
    step = sum(p.memory.values())
    if prefill is None and p.scenario.get("cuda_graphs"):
        return step - p.memory.get("activations", 0.0)
    return step if prefill is None else max(step, sum(prefill.memory.values()))
