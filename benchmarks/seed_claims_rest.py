"""Claims of seeds 001 (cuBLAS, cuDNN, NCCL) and 002 (GPU architecture lecture)."""

from __future__ import annotations

from seed_claims_core import (
    Claim,
    Pred,
    allreduce,
    coll_detail,
    gpu,
    kernel_measured,
    op_us,
    system,
)

from gpuperf.perfmodel.comm import busbw_factor, double_binary_tree_allreduce, ring_allreduce
from gpuperf.workloads import single_op

AR = "collective_time(Collective(coll='allreduce', nbytes={n}, ranks={r}), h100, dgx-h100)"
GEMM = "api.predict_op('gemm', gpu='a100', m={m}, n={n}, k={k}, dtype='fp16')"
MIB = 1 << 20


def per_sm_tflops(name: str, dtype: str) -> float:
    g = gpu(name)
    return g.peak(dtype) / g.sms / 1e12  # type: ignore[arg-type]


def tc_fma_per_clock() -> float:
    """A100 dense FP16 FLOP/s / (SMs × clock × 4 tensor cores × 2 FLOP per FMA)."""
    g = gpu("a100")
    return g.peak("fp16") / (g.sms * g.boost_clock_mhz * 1e6 * 4 * 2)


def gemm_tflops(m: int, n: int, k: int) -> float:
    return 2 * m * n * k / (op_us("gemm", "a100", m=m, n=n, k=k, dtype="fp16") * 1e-6) / 1e12


def gemm_meas(m: int, n: int, k: int) -> Pred | None:
    p = kernel_measured("gemm", "a100", m=m, n=n, k=k, dtype="fp16")
    return None if p is None else Pred(2 * m * n * k / (float(p.value) * 1e-6) / 1e12, p.detail)


def busbw(nbytes: int, ranks: int) -> Pred:
    t = allreduce(nbytes, ranks)
    nvls = allreduce(nbytes, ranks, nvls=True)
    return Pred(t.detail["busbw_gbps"], f"{t.detail['algo']}; NVLS {nvls.detail['busbw_gbps']:.0f}")


def coll_meas(nbytes: int, ranks: int) -> Pred | None:
    """busbw of a committed allreduce run of this size (none committed yet: returns None)."""
    p = kernel_measured("allreduce", "h100", nbytes=nbytes, ranks=ranks)
    if p is None:
        return None
    algbw = nbytes / (float(p.value) * 1e-6) / 1e9
    return Pred(algbw * busbw_factor("allreduce", ranks), p.detail)


def relu_intensity(dtype: str) -> float:
    return single_op.elementwise("relu", 1 << 20, dtype).cost().intensity  # type: ignore[arg-type]


def gemm_ratio(m: int, n: int, k: int, m2: int, n2: int, k2: int, g: str = "a100") -> float:
    """Throughput of the second shape over the first (FLOP/s ratio)."""
    t1 = op_us("gemm", g, m=m, n=n, k=k, dtype="fp16")
    t2 = op_us("gemm", g, m=m2, n=n2, k=k2, dtype="fp16")
    return (m2 * n2 * k2 / t2) / (m * n * k / t1)


def drop_2049() -> Pred:
    r = gemm_ratio(2048, 2048, 2048, 2049, 2049, 2049)
    return Pred("drop" if r < 0.9 else "no drop", f"2049³ runs at {r:.2f}× the FLOP/s")


CLAIMS: list[Claim] = [
    Claim(
        "001",
        "§1.3",
        "Volta: 每个 SM 峰值: 125 TFLOPS (fp16)",
        "V100 per-SM FP16 peak",
        125,
        "TFLOP/s",
        reason="no V100 profile; 125 TFLOP/s is the whole V100 (80 SMs), ~1.6 per SM",
    ),
    Claim(
        "001",
        "§1.3",
        "Ampere: 每个 SM 峰值: 312 TFLOPS (fp16, 非稀疏)",
        "A100 per-SM FP16 dense peak",
        312,
        "TFLOP/s",
        "exact",
        predict=lambda: per_sm_tflops("a100", "fp16"),
        call="load_gpu('a100').peak('fp16') / load_gpu('a100').sms",
        reason="312 TFLOP/s is the whole A100 (108 SMs), not one SM",
    ),
    Claim(
        "001",
        "§1.3",
        "Hopper: 每个 SM 峰值: 1000 TFLOPS (fp8)",
        "H100 per-SM FP8 peak",
        1000,
        "TFLOP/s",
        "exact",
        predict=lambda: per_sm_tflops("h100", "fp8"),
        call="load_gpu('h100').peak('fp8') / load_gpu('h100').sms",
        reason="per SM it is 15; the whole H100 does 1979 dense FP8 (1000 is ~its FP16)",
    ),
    Claim(
        "001",
        "§1.3",
        "A100 每个 SM 4 个 Tensor Core, 每个 8×4×8 /clock",
        "FMA per tensor core per clock (8·4·8 = 256)",
        256,
        "FMA/clk",
        "exact",
        predict=tc_fma_per_clock,
        call="peak('fp16') / (sms × boost_clock × 4 TC × 2) on load_gpu('a100')",
    ),
    Claim(
        "001",
        "§3.1",
        "总通信量: 2(N-1)/N × data (N=4)",
        "ring all-reduce bytes / data",
        1.5,
        "×data",
        "exact",
        predict=lambda: busbw_factor("allreduce", 4),
        call="busbw_factor('allreduce', 4)",
    ),
    Claim(
        "001",
        "§3.1",
        "Ring 步数: 2(N-1) (N=4)",
        "ring all-reduce latency terms",
        6,
        "steps",
        "exact",
        predict=lambda: ring_allreduce(4, 0.0, 1.0, 0.0),
        call="ring_allreduce(4, n=0, a=1, b=0)",
    ),
    Claim(
        "001",
        "§3.1",
        "Tree: 步数 2 log₂(N) (N=4)",
        "tree all-reduce latency terms",
        4,
        "steps",
        "exact",
        predict=lambda: double_binary_tree_allreduce(4, 0.0, 1.0, 0.0),
        call="double_binary_tree_allreduce(4, n=0, a=1, b=0)",
    ),
    Claim(
        "001",
        "§3.1",
        "Tree: 总通信量 2 × data",
        "tree all-reduce bytes / data",
        2,
        "×data",
        "exact",
        predict=lambda: double_binary_tree_allreduce(4, 1.0, 0.0, 1.0),
        call="double_binary_tree_allreduce(4, n=1, a=0, b=1)",
    ),
    Claim(
        "001",
        "§3.1",
        "CollNet: 条件: 需要 NVSwitch; 带宽 900 GB/s per GPU",
        "in-switch all-reduce busbw, 1 GiB, 8 GPUs",
        900,
        "GB/s",
        predict=lambda: Pred(allreduce(1 << 30, nvls=True).detail["busbw_gbps"], "NVLS"),
        call=AR.format(n="1 << 30", r=8) + " with nvls=True",
        reason="CollNet needs SHARP network switches; on NVSwitch the in-switch algorithm is "
        "NVLS, and 900 GB/s counts both directions",
    ),
    Claim(
        "001",
        "§3.4",
        "50 GB/s per channel (NVLink 4.0)",
        "NVLink4 per link, bidir, GB/s",
        50,
        "GB/s",
        "exact",
        predict=lambda: gpu("h100").nvlink_bw * 2 / 18 / 1e9,
        call="load_gpu('h100').nvlink_bw × 2 / 18 links",
    ),
    Claim(
        "001",
        "§3.4",
        "900 GB/s bidirectional per GPU",
        "H100 NVLink bidir, GB/s",
        900,
        "GB/s",
        "exact",
        predict=lambda: gpu("h100").nvlink_bw * 2 / 1e9,
        call="load_gpu('h100').nvlink_bw × 2",
    ),
    Claim(
        "001",
        "§3.4",
        "450 GB/s per GPU per NVSwitch × 4 = 1.8 TB/s",
        "NVLink per GPU, GB/s",
        1800,
        "GB/s",
        "exact",
        predict=lambda: gpu("h100").nvlink_bw * 2 / 1e9,
        call="load_gpu('h100').nvlink_bw × 2",
        reason="the 18 links (900 GB/s bidir) are split 5/4/4/5 over the 4 NVSwitches",
    ),
    Claim(
        "001",
        "§3.4",
        "8-GPU All-Reduce 128MB tensor: 47 GB/s",
        "algbw, 128 MiB, 8 H100s",
        47,
        "GB/s",
        predict=lambda: Pred(
            allreduce(128 * MIB).detail["algbw_gbps"], coll_detail(allreduce(128 * MIB))
        ),
        call=AR.format(n="128 << 20", r=8) + ".detail['algbw_gbps']",
        measured=lambda: None,
        reason="NCCL reaches several times this on NVLink4 (ring or NVLS)",
    ),
    Claim(
        "001",
        "§3.4",
        "延迟: < 3ms (128MB)",
        "all-reduce time, 128 MiB, ms",
        3,
        "ms",
        "max",
        predict=lambda: allreduce(128 * MIB).time * 1e3,
        call=AR.format(n="128 << 20", r=8),
    ),
    Claim(
        "001",
        "§3.4",
        "算法: CollNet (利用 NVSwitch)",
        "algorithm, 128 MiB, 8 GPUs",
        "collnet",
        "algo",
        "text",
        predict=lambda: str(allreduce(128 * MIB).detail["algo"]),
        call=AR.format(n="128 << 20", r=8) + ".detail['algo']",
        reason="CollNet is a network (SHARP) algorithm; NVSwitch nodes use ring or NVLS",
    ),
    Claim(
        "001",
        "§3.4",
        "DGX A100 每对 GPU 之间: 600 GB/s bidirectional",
        "A100 NVLink per GPU, bidir, GB/s",
        600,
        "GB/s",
        "exact",
        predict=lambda: gpu("a100").nvlink_bw * 2 / 1e9,
        call="load_gpu('a100').nvlink_bw × 2",
        reason="(600 GB/s is per GPU; through NVSwitch one pair can use all of it)",
    ),
    Claim(
        "001",
        "§3.5",
        "GPUDirect RDMA: 满带宽 (200/400 Gbps)",
        "DGX H100 NIC, Gb/s",
        400,
        "Gb/s",
        "exact",
        predict=lambda: system("dgx-h100").nic_bw * 8 / 1e9,
        call="load_system('dgx-h100').nic_bw × 8",
    ),
    Claim(
        "001",
        "§3.5",
        "延迟: ~50µs (CPU 中转) vs ~5µs (GPUDirect)",
        "",
        None,
        "µs",
        reason="gpuperf has no host-staged network path to compare",
    ),
    *[
        Claim(
            "001",
            "§7 GEMM table",
            f"{m}×{n}×{k} | {tf} TFLOPS",
            f"A100 FP16 GEMM {m}×{n}×{k}",
            tf,
            "TFLOP/s",
            predict=lambda m=m, n=n, k=k: gemm_tflops(m, n, k),
            call=GEMM.format(m=m, n=n, k=k) + " → 2mnk / time",
            measured=lambda m=m, n=n, k=k: gemm_meas(m, n, k),
            reason=why,
        )
        for (m, n, k, tf, why) in (
            (
                1024,
                1024,
                1024,
                270,
                "a 1024³ GEMM fills <1 wave of tiles and is too short to "
                "amortize its pipeline fill: far from 87 % of peak",
            ),
            (
                2048,
                2048,
                2048,
                295,
                "95 % of the dense peak is more than cuBLAS sustains on an A100",
            ),
            (4096, 4096, 1024, 280, "K=1024 gives each tile few k-steps"),
            (16384, 8192, 8192, 300, "96 % of the dense peak is more than cuBLAS sustains"),
        )
    ],
    Claim(
        "001",
        "§7 conv table",
        "3×3 s1 64c 224² WINOGRAD 180 TFLOPS … (4 rows)",
        "cuDNN convolution TFLOP/s",
        None,
        "TFLOP/s",
        reason="out of scope: gpuperf models Transformer ops, no convolutions (also §2 "
        "Winograd 2.25×/4×, im2col −50 %, fusion −75 % traffic)",
    ),
    *[
        Claim(
            "001",
            "§7 NCCL table",
            f"{mb} MB | {n} GPU | {bw} GB/s",
            f"all-reduce busbw, {mb} MiB, {n} H100s",
            bw,
            "GB/s",
            predict=lambda mb=mb, n=n: busbw(mb * MIB, n),
            call=AR.format(n=f"{mb} << 20", r=n) + ".detail['busbw_gbps']",
            measured=lambda mb=mb, n=n: coll_meas(mb * MIB, n),
            reason="busbw cannot grow with GPU count on NVSwitch, nor pass the 450 GB/s "
            "per-direction link (NVLS aside)"
            if n == 8 or bw < 150
            else "the table scales busbw with N: looks like N × a per-link figure",
        )
        for mb, row in (
            (1, (84, 170, 330)),
            (16, (150, 300, 600)),
            (128, (165, 330, 660)),
            (1024, (168, 340, 680)),
        )
        for n, bw in zip((2, 4, 8), row, strict=True)
    ],
    Claim(
        "001",
        "§7",
        "对于 8 GPU, bus_bw = data_size × 1.75 / time",
        "busbw / algbw, 8 GPUs",
        1.75,
        "×",
        "exact",
        predict=lambda: busbw_factor("allreduce", 8),
        call="busbw_factor('allreduce', 8)",
    ),
    # --- 002 ------------------------------------------------------------------------------------
    Claim(
        "002",
        "Page 9",
        "GA100 Full GPU: 128 个 SM",
        "A100 SMs",
        128,
        "SMs",
        "exact",
        predict=lambda: gpu("a100").sms,
        call="load_gpu('a100').sms",
        reason="(128 is the full GA100 die; the A100 product enables 108)",
    ),
    Claim(
        "002",
        "Page 10",
        "L1 / Shared Memory: 19 TB/s",
        "A100 aggregate SRAM bandwidth",
        19,
        "TB/s",
        reason="GpuSpec has no SRAM bandwidth (108 SMs × 128 B/clk × 1.41 GHz = 19.5)",
    ),
    Claim(
        "002",
        "Page 10",
        "HBM: 容量大 (40-80GB) … (1.5-2.0 TB/s): 40GB",
        "A100 40GB, GiB",
        40,
        "GiB",
        "exact",
        predict=lambda: gpu("a100-sxm4-40gb").hbm_bytes / 2**30,
        call="load_gpu('a100-sxm4-40gb').hbm_bytes",
    ),
    Claim(
        "002",
        "Page 10",
        "HBM … 1.5-2.0 TB/s: 1.5",
        "A100 40GB HBM bandwidth",
        1.5,
        "TB/s",
        predict=lambda: gpu("a100-sxm4-40gb").hbm_bw / 1e12,
        call="load_gpu('a100-sxm4-40gb').hbm_bw",
    ),
    Claim(
        "002",
        "Page 10",
        "HBM … 1.5-2.0 TB/s: 2.0",
        "A100 80GB HBM bandwidth",
        2.0,
        "TB/s",
        predict=lambda: gpu("a100").hbm_bw / 1e12,
        call="load_gpu('a100').hbm_bw",
    ),
    Claim(
        "002",
        "Page 16",
        "FP32 ReLU: 强度 = 1/8 FLOP/Byte",
        "ReLU intensity, fp32",
        0.125,
        "FLOP/B",
        "exact",
        predict=lambda: relu_intensity("fp32"),
        call="single_op.elementwise('relu', n, 'fp32').cost().intensity",
    ),
    Claim(
        "002",
        "Page 16",
        "FP16 ReLU: 强度 = 1/4 FLOP/Byte",
        "ReLU intensity, fp16",
        0.25,
        "FLOP/B",
        "exact",
        predict=lambda: relu_intensity("fp16"),
        call="single_op.elementwise('relu', n, 'fp16').cost().intensity",
    ),
    Claim(
        "002",
        "Page 17",
        "Tensor Cores 吞吐量是普通 CUDA Cores 的 10 倍以上",
        "A100 FP16 tensor / FP32 peak",
        10,
        "×",
        "min",
        predict=lambda: gpu("a100").peak("fp16") / gpu("a100").peak("fp32"),
        call="load_gpu('a100').peak('fp16') / peak('fp32')",
    ),
    Claim(
        "002",
        "Page 32",
        "矩阵大小从 2048 增加到 2049, 性能会突然下降",
        "A100 GEMM 2048³ → 2049³ throughput",
        "drop",
        "",
        "text",
        predict=drop_2049,
        call="(2049³ / t(2049³)) / (2048³ / t(2048³)), t = " + GEMM.format(m="s", n="s", k="s"),
        reason="(gpuperf: 2049 breaks 16-byte alignment and adds a row/column of tiles)",
    ),
    Claim(
        "002",
        "Page 31",
        "Unaligned: … 带宽减半",
        "A100 GEMM FLOP/s, K=4095 vs 4096",
        0.5,
        "ratio",
        predict=lambda: gemm_ratio(4096, 4096, 4096, 4096, 4096, 4095),
        call="(4096²·4095 / t) / (4096³ / t), t = " + GEMM.format(m=4096, n=4096, k="K"),
        reason="gpuperf: a misaligned GEMM loses its vectorized TMA/cp.async loads and "
        "keeps gemm_misaligned_eff / gemm_eff of its rate (ModelParams); the seed says ½",
    ),
    Claim(
        "002",
        "Page 45",
        "FlashAttention IO 复杂度 O(N² / √M)",
        "FlashAttention HBM traffic",
        None,
        "",
        reason="not a gpuperf number; the FlashAttention paper proves Θ(N² d² / M)",
    ),
    Claim(
        "002",
        "Page 26",
        "Control divergence … 算力利用率减半",
        "",
        None,
        "",
        reason="gpuperf models no branch divergence",
    ),
]
