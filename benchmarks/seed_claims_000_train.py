"""Claims of seed 000, second half: NCCL all-reduce over NVSwitch, the training step, hardware."""

from __future__ import annotations

from seed_claims_000 import PLAN, SEED, TRAIN, layer_grad_bytes, plan, plan_pred, train_part_ms
from seed_claims_core import Claim, Pred, allreduce, coll_detail, gpu, model, predict

from gpuperf.perfmodel.comm import ring_allreduce

D = 4.7e6  # the seed's per-layer gradient, bytes
BW = 450e9  # the seed's per-direction NVSwitch bandwidth, bytes/s
B32 = "65,536 tokens × 6 × 6.7 G FLOP need ≥335 ms on 8 dense FP16 peaks"
AR = "collective_time(Collective(coll='allreduce', nbytes={n}, ranks=8), h100, dgx-h100)"


def ar_pred(nbytes: float, scale: float = 1.0, **kw: object) -> Pred:
    t = allreduce(nbytes, **kw)
    return Pred(t.time * 1e6 * scale, coll_detail(t))


def all_grads_ms() -> Pred:
    nbytes = model("llama2-7b").param_count() * 2  # bf16 gradients, the whole model
    t = allreduce(nbytes)
    return Pred(t.time * 1e3, f"{nbytes / 1e9:.1f} GB of bf16 gradients, " + coll_detail(t))


def exposed_dp_ms() -> Pred:
    r = plan(1, 8)
    return Pred(r.extra["breakdown_ms"]["dp_comm"], "DP reduction left after overlap with backward")


def per_step_latency_us() -> Pred:
    t = allreduce(1 << 20, algo="ring", proto="simple")
    return Pred(t.detail["lat_us"] / 14, f"ring/Simple latency {t.detail['lat_us']:.0f} µs / 14")


CLAIMS: list[Claim] = [
    Claim(
        SEED,
        "§7.3",
        "Gradient size per layer: ~4.7 MB (FP32 grad)",
        "fp32 gradient of one layer, MB",
        4.7,
        "MB",
        "exact",
        predict=lambda: layer_grad_bytes() / 1e6,
        call="(p['attn'] + p['mlp'] + p['norms']) / 32 * 4 with p = "
        "load_model('llama2-7b').param_breakdown()",
        reason="a layer has 202 M parameters: 810 MB in fp32, not 4.7 MB",
    ),
    Claim(
        SEED,
        "§7.3",
        "2 × 7/8 × (4.7 MB / 450 GB/s) ≈ 18 µs",
        "ring bandwidth term, µs",
        18,
        "µs",
        "exact",
        predict=lambda: ring_allreduce(8, D, 0.0, 1 / BW) * 1e6,
        call="ring_allreduce(8, 4.7e6, a=0, b=1/450e9)",
    ),
    Claim(
        SEED,
        "§7.3",
        "≈ 18 µs per layer's gradient (NCCL, 8×H100)",
        "all-reduce of 4.7 MB on 8 H100s, µs",
        18,
        "µs",
        predict=lambda: ar_pred(D),
        call=AR.format(n="4.7e6"),
        reason="NCCL's per-call latency, not bandwidth, dominates at 4.7 MB",
    ),
    Claim(
        SEED,
        "§7.3",
        "32 × 18 µs ≈ 576 µs per step",
        "32 per-layer all-reduces, µs",
        576,
        "µs",
        predict=lambda: ar_pred(layer_grad_bytes(), 32),
        call="32 × " + AR.format(n="<810 MB fp32 layer gradient>"),
        reason="the real per-layer gradient is 170× larger (810 MB)",
    ),
    Claim(
        SEED,
        "§8.1",
        "T = 2×7×(1 µs + 4.7MB/450GB/s) = 160 µs",
        "α-β ring time, µs",
        160,
        "µs",
        "exact",
        predict=lambda: ring_allreduce(8, D, 1e-6, 1 / BW) * 1e6,
        call="ring_allreduce(8, 4.7e6, a=1e-6, b=1/450e9)",
        reason="each ring step moves D/N, not D: the seed's formula charges N× the bytes",
    ),
    Claim(
        SEED,
        "§8.1",
        "α = 启动延迟 (~1 µs)",
        "latency per ring step, µs",
        1,
        "µs",
        predict=per_step_latency_us,
        call="collective_time(allreduce 1 MiB, 8 ranks, algo='ring', proto='simple')"
        ".detail['lat_us'] / 14",
        reason="NCCL's model: 8.4 µs base + 3.4 µs per NVLink hop (Simple protocol)",
    ),
    Claim(
        SEED,
        "§8.1",
        "大消息 (> 4 MB): 使用 tree algorithm",
        "algorithm NCCL picks, 64 MiB",
        "tree",
        "algo",
        "text",
        predict=lambda: str(allreduce(64 << 20).detail["algo"]),
        call=AR.format(n="64 << 20") + ".detail['algo']",
        reason="inside one NVSwitch node NCCL runs ring (or NVLS); tree is for multi-node",
    ),
    Claim(
        SEED,
        "§8.1",
        "小消息 (≤ 256 KB): NVSwitch direct (无 ring)",
        "algorithm NCCL picks, 128 KiB",
        "direct",
        "algo",
        "text",
        predict=lambda: str(allreduce(128 << 10).detail["algo"]),
        call=AR.format(n="128 << 10") + ".detail['algo']",
        reason="NCCL has no 'direct' all-reduce; small messages use ring with the LL protocol",
    ),
    Claim(
        SEED,
        "§7.3",
        "Forward: ~11 ms (B=1)",
        "training forward, one GPU, ms",
        11,
        "ms",
        predict=lambda: train_part_ms("fwd"),
        call=TRAIN + ").table: forward rows, summed",
        reason="28 TFLOP of forward GEMMs cannot run in 11 ms on 989 TFLOP/s",
    ),
    Claim(
        SEED,
        "§7.3",
        "Backward: ~22 ms (≈ 2× forward)",
        "training backward, ms",
        22,
        "ms",
        predict=lambda: train_part_ms("bwd"),
        call=TRAIN + ").table: .bwd/.dgrad/.wgrad rows, summed",
        reason="2× a forward that is itself 4× too fast",
    ),
    Claim(
        SEED,
        "§7.3",
        "NCCL all-reduce: ~0.6 ms (overlapped)",
        "all-reduce of all gradients, ms",
        0.6,
        "ms",
        predict=all_grads_ms,
        call=AR.format(n="2 × param_count()"),
        reason="13.5 GB of bf16 gradients cannot cross NVLink in 0.6 ms; only overlap hides it",
    ),
    Claim(
        SEED,
        "§7.3",
        "→ Effective overhead < 100 µs per step",
        "exposed DP comm, µs",
        100,
        "µs",
        "max",
        predict=lambda: Pred(exposed_dp_ms().value * 1e3, exposed_dp_ms().detail),
        call=PLAN.format(mb=1, g=8) + ".extra['breakdown_ms']['dp_comm']",
        reason="gpuperf leaves the last bucket of the gradient reduce-scatter (and of ZeRO-1's "
        "parameter all-gather) exposed",
    ),
    Claim(
        SEED,
        "§7.3",
        "Optimizer step (AdamW): ~2 ms",
        "AdamW over 6.7 B params, ms",
        2,
        "ms",
        predict=lambda: train_part_ms("opt"),
        call=TRAIN + ").table: optimizer/* rows, summed",
        reason="AdamW streams ~16 B/param of states each way: ≥60 ms on one H100 (sharded "
        "8 ways with ZeRO-1 it is ~10 ms)",
    ),
    Claim(
        SEED,
        "§7.3",
        "Total: ~35 ms per step (8×H100, B=1/GPU)",
        "training step, ms",
        35,
        "ms",
        predict=lambda: plan_pred(1, 8, plan(1, 8).total_ms),
        call=PLAN.format(mb=1, g=8) + ".total_ms",
        reason="6 × 6.7 G × 2048 = 83 TFLOP per GPU per step: ≥84 ms at the dense peak",
    ),
    Claim(
        SEED,
        "§7.3",
        "Throughput: ~59 tokens/s (B=1)",
        "training tokens/s, one GPU",
        59,
        "tok/s",
        predict=lambda: predict(mode="train", seq=2048).tokens_per_s,
        call=TRAIN + ").tokens_per_s",
        reason="2048 tokens / 35 ms = 58,500 tok/s: a factor 1000 lost again",
    ),
    Claim(
        SEED,
        "§12",
        "训练 (B=32): Total Step ~236 ms (8 GPU)",
        "step, B=32 over 8 GPUs, ms",
        236,
        "ms",
        predict=lambda: plan_pred(1, 32, plan(1, 32).total_ms),
        call=PLAN.format(mb=1, g=32) + ".total_ms",
        reason="2.65 PFLOP per step over 8 GPUs need ≥335 ms at the dense peak",
    ),
    Claim(
        SEED,
        "§12",
        "Forward ~75 ms + Backward ~150 ms (B=32)",
        "fwd+bwd per step, ms",
        225,
        "ms",
        predict=lambda: plan_pred(1, 32, plan(1, 32).extra["breakdown_ms"]["compute"]),
        call=PLAN.format(mb=1, g=32) + ".extra['breakdown_ms']['compute']",
        reason=B32,
    ),
    Claim(
        SEED,
        "§12",
        "~280,000 tokens/s (32 × 2048 × 4.2)",
        "training tokens/s, 8 GPUs",
        280000,
        "tok/s",
        predict=lambda: plan_pred(1, 32, plan(1, 32).tokens_per_s),
        call=PLAN.format(mb=1, g=32) + ".tokens_per_s",
        reason=B32,
    ),
    Claim(
        SEED,
        "§12",
        "~22,000 tokens/s/GPU",
        "training tokens/s per GPU",
        22000,
        "tok/s",
        predict=lambda: plan(1, 32).tokens_per_s / 8,
        call=PLAN.format(mb=1, g=32) + ".tokens_per_s / 8",
        reason="also inconsistent with its own 280,000 / 8 = 35,000",
    ),
    Claim(
        SEED,
        "§12",
        "Backward 内存 ~65 GB (峰值)",
        "peak memory per GPU, GB",
        65,
        "GB",
        predict=lambda: plan_pred(4, 32, sum(plan(4, 32).memory.values()) / 1e9),
        call="sum(" + PLAN.format(mb=4, g=32) + ".memory.values())",
        reason="(B=32 over 8 GPUs is micro-batch 4: fp16 weights and gradients at 2 B/param, a "
        "ZeRO-1 eighth of the 12 B/param optimizer states, 4 sequences' activations)",
    ),
    Claim(
        SEED,
        "§12",
        "Optimizer (AdamW) ~5 GB",
        "optimizer states per GPU, GB",
        5,
        "GB",
        predict=lambda: plan(1, 32).memory["optimizer"] / 1e9,
        call=PLAN.format(mb=1, g=32) + ".memory['optimizer']",
        reason="fp32 master + m + v = 12 B/param = 81 GB; 10 GB per GPU even with ZeRO-1",
    ),
    Claim(
        SEED,
        "§9 figure",
        "HBM3: 80 GB",
        "H100 memory, GiB",
        80,
        "GiB",
        "exact",
        predict=lambda: gpu("h100").hbm_bytes / 2**30,
        call="load_gpu('h100').hbm_bytes",
    ),
    Claim(
        SEED,
        "§9 figure",
        "3.35 TB/s peak bandwidth",
        "H100 HBM bandwidth, TB/s",
        3.35,
        "TB/s",
        "exact",
        predict=lambda: gpu("h100").hbm_bw / 1e12,
        call="load_gpu('h100').hbm_bw",
    ),
    Claim(
        SEED,
        "§7.3",
        "900 GB/s bidir per GPU → 450 GB/s one-way",
        "NVLink per direction, GB/s",
        450,
        "GB/s",
        "exact",
        predict=lambda: gpu("h100").nvlink_bw / 1e9,
        call="load_gpu('h100').nvlink_bw",
    ),
    Claim(
        SEED,
        "§11.1",
        "TF32 … same speed (as FP16)",
        "TF32 / FP16 tensor peak",
        1.0,
        "ratio",
        "exact",
        predict=lambda: gpu("h100").peak("tf32") / gpu("h100").peak("fp16"),
        call="load_gpu('h100').peak('tf32') / load_gpu('h100').peak('fp16')",
        reason="TF32 tensor cores run at half the FP16 rate (and TF32 has a 10-bit mantissa, "
        "not 19: 19 bits is its total width)",
    ),
    Claim(
        SEED,
        "§11.3",
        "nvidia-smi -ac 1215,1410",
        "A100 boost clock, MHz",
        1410,
        "MHz",
        "exact",
        predict=lambda: gpu("a100").boost_clock_mhz,
        call="load_gpu('a100').boost_clock_mhz",
    ),
    Claim(
        SEED,
        "§6.2",
        "LDG latency ~200-800 cycles; HMMA ~8-16 cycles",
        "",
        None,
        "cycles",
        reason="gpuperf has no instruction-latency model (it works at kernel level)",
    ),
    Claim(
        SEED,
        "§11.3",
        "ECC 牺牲 ~6% 带宽",
        "ECC costs ~6 % bandwidth",
        None,
        "%",
        reason="no ECC on/off measurement; HBM3 ECC is always on in the datasheet number",
    ),
]
