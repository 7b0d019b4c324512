"""Collective cost model: α-β hand math, nccl-tests busbw factors, NCCL tuner numbers worked by hand
from modeling-facts §3 (NCCL 2.30.7 tables), algorithm choice and topology behaviour."""

from __future__ import annotations

import math

import pytest

from gpuperf.errors import InputError
from gpuperf.hardware.spec import GpuSpec, SystemSpec
from gpuperf.perfmodel import comm, comm_nccl
from gpuperf.perfmodel.comm import CommParams, busbw_factor, collective_time, p2p_time
from gpuperf.perfmodel.ops import P2P, Collective


def _gpu(arch: str, nvlink: float, pcie: float = 64e9) -> GpuSpec:
    return GpuSpec(
        name=f"test-{arch}",
        display_name=arch,
        arch=arch,
        compute_capability={"ampere": "8.0", "hopper": "9.0", "ada": "8.9"}[arch],
        sms=132,
        boost_clock_mhz=1980,
        peak_flops={"bf16": 989.4e12},
        hbm_bytes=80e9,
        hbm_bw=3.35e12,
        l2_bytes=50e6,
        smem_per_sm_bytes=228e3,
        nvlink_bw=nvlink,
        pcie_bw=pcie,
    )


H100 = _gpu("hopper", 450e9)
A100 = _gpu("ampere", 300e9, pcie=32e9)
L40S = _gpu("ada", 0.0, pcie=32e9)


def _dgx(gpu: GpuSpec, nic_bw: float) -> SystemSpec:
    return SystemSpec(
        name=f"dgx-{gpu.arch}",
        display_name="DGX",
        gpu=gpu,
        gpus_per_node=8,
        nvswitch=True,
        nvlink_bw=gpu.nvlink_bw,
        nics_per_node=8,
        nic_bw=nic_bw,
    )


DGX_H100 = _dgx(H100, 50e9)  # 8x ConnectX-7 400 Gb/s
DGX_A100 = _dgx(A100, 25e9)  # 8x ConnectX-6 HDR 200 Gb/s


def _ar(nbytes: int, ranks: int, coll: str = "allreduce") -> Collective:
    return Collective("x", coll, nbytes, ranks)  # type: ignore[arg-type]


# --- α-β formulas (modeling-facts §5) ---------------------------------------------------------


def test_ring_allreduce_hand_numbers():
    # p=4, n=1 MB, a=1 µs, b=1 ns/B: 2·3·1e-6 + 2·(3/4)·1e6·1e-9 = 6 µs + 1.5 ms
    assert comm.ring_allreduce(4, 1e6, 1e-6, 1e-9) == pytest.approx(1.506e-3)
    # with a reduction cost c = 0.5 ns/B: + (3/4)·1e6·0.5e-9 = 0.375 ms
    assert comm.ring_allreduce(4, 1e6, 1e-6, 1e-9, 0.5e-9) == pytest.approx(1.881e-3)


def test_alpha_beta_family_hand_numbers():
    p, n, a, b = 8, 8e6, 2e-6, 1e-9
    assert comm.ring_allgather(p, n, a, b) == pytest.approx(7 * a + 7e6 * b)
    assert comm.recursive_doubling_allreduce(p, n, a, b) == pytest.approx(3 * (a + n * b))
    assert comm.rabenseifner_allreduce(p, n, a, b) == pytest.approx(6 * a + 14e6 * b)
    assert comm.binomial_broadcast(p, n, a, b) == pytest.approx(3 * (a + n * b))
    assert comm.double_binary_tree_allreduce(p, n, a, b) == pytest.approx(6 * a + 2 * n * b)
    assert comm.pairwise_alltoall(p, n, a, b) == pytest.approx(7 * a + 7e6 * b)
    # Ring and Rabenseifner reach the bandwidth lower bound 2((p-1)/p) n b; doubling does not.
    bound = 2 * (p - 1) / p * n * b
    assert comm.ring_allreduce(p, n, 0, b) == pytest.approx(bound)
    assert comm.recursive_doubling_allreduce(p, n, 0, b) > bound


def test_hierarchical_allreduce_hand_numbers():
    # g=8 GPUs/node, 4 nodes, n=1 GB: RS+AG intra 2·(7 a_i + 7/8 n b_i); inter AR on n/8.
    g, nodes, n = 8, 4, 1e9
    ai, bi, ae, be = 1e-6, 1 / 360e9, 5e-6, 1 / 48e9
    intra = 2 * (7 * ai + 7 / 8 * n * bi)
    inter = 2 * 3 * ae + 2 * 3 / 4 * (n / 8) * be
    assert comm.hierarchical_allreduce(g, nodes, n, ai, bi, ae, be) == pytest.approx(intra + inter)


def test_busbw_factors_nccl_tests():
    assert busbw_factor("allreduce", 8) == pytest.approx(14 / 8)
    assert busbw_factor("allgather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("reducescatter", 4) == pytest.approx(3 / 4)
    assert busbw_factor("alltoall", 16) == pytest.approx(15 / 16)
    assert busbw_factor("broadcast", 8) == 1.0
    assert busbw_factor("sendrecv", 2) == 1.0


# --- topology search --------------------------------------------------------------------------


def test_channel_search_single_node():
    # Hopper: 18 links × 20.6 = 370.8 GB/s; 60 GB/s channels: 6 fit (360) -> duplicated to 12 × 30.
    g = comm_nccl.search_graph(comm.topology(8, H100, DGX_H100))
    assert (g.channels, g.bw_intra) == (12, 30.0)
    # Ampere: 12 links × 20 = 240 GB/s; 6 channels at 40 -> 12 × 20.
    g = comm_nccl.search_graph(comm.topology(8, A100, DGX_A100))
    assert (g.channels, g.bw_intra) == (12, 20.0)


def test_channel_search_multi_node_is_nic_bound():
    # H100: NIC 50 GB/s behind PCIe Gen5 x16 = 48 GB/s in NCCL units: 8 rails × 48, no duplication
    # (Hopper rule: < 50 GB/s with > 4 channels).
    g = comm_nccl.search_graph(comm.topology(16, H100, DGX_H100))
    assert (g.channels, g.bw_inter) == (8, 48.0)
    # A100: HDR 25 GB/s, PCIe Gen4 24 GB/s: 8 × 24.
    g = comm_nccl.search_graph(comm.topology(32, A100, DGX_A100))
    assert (g.channels, g.bw_inter) == (8, 24.0)


# --- NCCL tuner, worked example of modeling-facts §3 ------------------------------------------


@pytest.mark.parametrize(
    ("algo", "proto", "lat_us"),
    [
        ("ring", "LL", 15.0),
        ("ring", "LL128", 40.6),
        ("ring", "Simple", 56.0),
        ("tree", "Simple", 64.4),
    ],
)
def test_single_node_latencies_match_worked_example(algo, proto, lat_us):
    t = collective_time(_ar(8, 8), H100, DGX_H100, algo=algo, proto=proto)
    assert t.detail["lat_us"] == pytest.approx(lat_us)


def test_two_node_ring_simple_latency_with_plateau():
    # 8.4 + 28·3.4 + 2·14 = 131.6 µs; × 1.4 once nBytes/(nChannels·nRanks) >= 64 (ring plateau).
    small = collective_time(_ar(64, 16), H100, DGX_H100, algo="ring", proto="Simple")
    assert small.detail["lat_us"] == pytest.approx(131.6)
    big = collective_time(_ar(1 << 20, 16), H100, DGX_H100, algo="ring", proto="Simple")
    assert big.detail["lat_us"] == pytest.approx(131.6 * 1.4)


def test_ring_simple_bandwidth_hand_number():
    # 12 ch × 30 GB/s = 360 GB/s bus; algBw = 360 · 8/14; t = 56 µs + 1 GiB / algBw.
    n = 1 << 30
    t = collective_time(_ar(n, 8), H100, DGX_H100, algo="ring", proto="Simple")
    expect_us = 56.0 + n / (1e3 * 360 * 8 / 14)
    assert t.time * 1e6 == pytest.approx(expect_us)
    assert t.detail["busbw_gbps"] == pytest.approx(n / (expect_us * 1e3) * 14 / 8)
    assert t.bound == "comm" and t.t_comm == t.time


def test_tree_ll128_bandwidth_caps():
    # Single node Hopper tree LL128: min(0.92·360, 12·38.7) = 331.2; ×7/9 = 257.6 (< 12·36.7);
    # ×0.85 (Hopper tree pattern) = 218.96; algBw = ×0.5.
    topo = comm.topology(8, H100, DGX_H100)
    g = comm_nccl.search_graph(topo)
    bus, alg = comm_nccl.bandwidth("allreduce", "tree", "LL128", topo, g)
    assert bus == pytest.approx(331.2 * 7 / 9 * 0.85)
    assert alg == pytest.approx(bus / 2)


# --- behaviour --------------------------------------------------------------------------------


def test_choice_flips_from_latency_optimal_to_ring():
    small = collective_time(_ar(1024, 8), H100, DGX_H100)
    large = collective_time(_ar(1 << 30, 8), H100, DGX_H100)
    assert (small.detail["algo"], small.detail["proto"]) == ("ring", "LL")
    assert (large.detail["algo"], large.detail["proto"]) == ("ring", "Simple")
    # Across nodes the tree's log2(nodes) network hops win at small sizes.
    small = collective_time(_ar(1024, 32), H100, DGX_H100)
    large = collective_time(_ar(1 << 30, 32), H100, DGX_H100)
    assert small.detail["algo"] == "tree"
    assert large.detail["algo"] == "ring"
    assert small.detail["lat_us"] < large.detail["lat_us"]


def test_large_allreduce_busbw_near_nvlink_bus():
    t = collective_time(_ar(1 << 30, 8), H100, DGX_H100)
    assert 340 < t.detail["busbw_gbps"] <= 360


@pytest.mark.parametrize(
    "coll", ["allreduce", "allgather", "reducescatter", "alltoall", "broadcast"]
)
def test_multi_node_slower_per_byte(coll):
    one = collective_time(_ar(256 << 20, 8, coll), H100, DGX_H100)
    two = collective_time(_ar(256 << 20, 16, coll), H100, DGX_H100)
    assert two.time > one.time
    assert two.detail["nodes"] == 2


def test_alltoall_across_nodes_is_nic_bound():
    # 16 ranks, 2 nodes: 8/16 of each rank's buffer crosses its 48 GB/s NIC.
    n = 1 << 30
    t = collective_time(_ar(n, 16, "alltoall"), H100, DGX_H100)
    assert t.detail["bw_term_us"] == pytest.approx(n / 2 / 48e3)


@pytest.mark.parametrize(
    "coll", ["allreduce", "allgather", "reducescatter", "alltoall", "broadcast"]
)
@pytest.mark.parametrize("ranks", [2, 4, 8, 16, 64])
def test_time_monotone_in_bytes(coll, ranks):
    sizes = [int(2 ** (k / 4)) for k in range(24, 4 * 31)]
    times = [collective_time(_ar(s, ranks, coll), H100, DGX_H100).time for s in sizes]
    assert all(b >= a for a, b in zip(times, times[1:], strict=False))


def test_nvls_only_when_enabled():
    off = collective_time(_ar(1 << 30, 8), H100, DGX_H100)
    on = collective_time(_ar(1 << 30, 8), H100, DGX_H100, nvls=True)
    assert off.detail["algo"] != "nvls"
    assert on.detail["algo"] == "nvls" and on.time < off.time
    with pytest.raises(InputError, match="NVLS needs"):
        collective_time(_ar(1 << 30, 8), H100, DGX_H100, algo="nvls")
    # Ampere has no NVLink SHARP even when asked.
    assert collective_time(_ar(1 << 30, 8), A100, DGX_A100, nvls=True).detail["algo"] == "ring"


def test_pcie_only_gpu_has_no_ll128():
    t = collective_time(_ar(16 << 20, 4), L40S)
    assert t.detail["proto"] != "LL128"
    with pytest.raises(InputError):
        collective_time(_ar(16 << 20, 4), L40S, algo="ring", proto="LL128")
    # PCIe Gen4 x16 in NCCL units: 24 GB/s per GPU, far below NVLink.
    assert t.time > collective_time(_ar(16 << 20, 4), A100).time


def test_calibration_knobs():
    base = collective_time(_ar(1 << 30, 8), H100, DGX_H100)
    half = collective_time(_ar(1 << 30, 8), H100, DGX_H100, params=CommParams(bw_eff=0.5))
    slow = collective_time(_ar(8, 8), H100, DGX_H100, params=CommParams(lat_scale=2.0))
    assert half.detail["bw_term_us"] == pytest.approx(2 * base.detail["bw_term_us"])
    assert half.detail["algo"] == base.detail["algo"]  # NCCL's pick ignores our calibration
    assert slow.detail["lat_us"] == pytest.approx(30.0)


def test_one_rank_is_free_and_bad_shapes_are_input_errors():
    assert collective_time(_ar(1 << 20, 1), H100).time == 0.0
    with pytest.raises(InputError, match="system"):
        collective_time(_ar(1 << 20, 16), H100, nodes=2)
    with pytest.raises(InputError, match="evenly"):
        collective_time(_ar(1 << 20, 12), H100, DGX_H100, nodes=5)
    with pytest.raises(InputError, match="algorithm"):
        collective_time(_ar(1 << 20, 8), H100, DGX_H100, algo="butterfly")


@pytest.mark.parametrize("ranks", [1, 8])
def test_a_forced_algorithm_is_checked_for_every_collective(ranks):
    with pytest.raises(InputError, match="expected one of: tree, ring"):
        collective_time(_ar(1 << 20, ranks), H100, DGX_H100, algo="butterfly")
    with pytest.raises(InputError, match="expected one of: LL, LL128, Simple"):
        collective_time(_ar(1 << 20, ranks), H100, DGX_H100, proto="LL256")
    # NCCL runs alltoall as grouped send/recv: NCCL_ALGO and NCCL_PROTO do not reach it
    for forced in ({"algo": "butterfly"}, {"algo": "ring"}, {"proto": "LL"}):
        with pytest.raises(InputError, match="alltoall has no NCCL algorithm or protocol"):
            collective_time(_ar(1 << 20, ranks, "alltoall"), H100, DGX_H100, **forced)


def test_one_rank_per_node_uses_tree_latency_on_the_network():
    # DP group under TP=8: 4 ranks on 4 nodes. Tree AR: 8.4 + 2·(0 + log2(4)·14) = 64.4 µs.
    t = collective_time(_ar(64, 4), H100, DGX_H100, nodes=4, algo="tree", proto="Simple")
    assert t.detail["lat_us"] == pytest.approx(64.4)
    g = comm_nccl.search_graph(comm.topology(4, H100, DGX_H100, nodes=4))
    assert g.channels * g.bw_inter == pytest.approx(48.0)  # one NIC
    a2a = collective_time(_ar(1 << 30, 4, "alltoall"), H100, DGX_H100, nodes=4)
    assert a2a.detail["bw_term_us"] == pytest.approx((1 << 30) * 3 / 4 / 48e3)


def test_p2p_inter_node_slower_than_nvlink():
    op = P2P("pp", 64 << 20)
    intra = p2p_time(op, H100, DGX_H100)
    inter = p2p_time(op, H100, DGX_H100, inter_node=True)
    assert inter.time > 5 * intra.time
    # Simple over one 48 GB/s NIC: 8.4 + 14 µs latency, 64 MiB / 48 GB/s.
    assert inter.time * 1e6 == pytest.approx(22.4 + (64 << 20) / 48e3)
    assert math.isclose(inter.detail["busbw_gbps"], inter.detail["algbw_gbps"])


def _coll(coll: str, nbytes: int, ranks: int) -> Collective:
    return Collective(f"{coll}/{nbytes}", coll, nbytes, ranks, "bf16")  # type: ignore[arg-type]


def test_runtime_channels_double_the_searched_rings():
    # Hopper, 18 NVLinks: 6 × 60 GB/s searched, duplicated to 12 × 30, doubled at connect: 24,
    # the count NCCL_DEBUG printed on 2 and 4 H200s (benchmarks/results/.../nccl_debug).
    g = comm_nccl.search_graph(comm.topology(4, H100))
    assert comm_nccl.runtime_channels(g) == 24
    wide = comm_nccl.Graph(channels=20, bw_intra=10.0, bw_inter=10.0, same_channels=True)
    assert comm_nccl.runtime_channels(wide) == 32  # MAXCHANNELS


def test_ring_copy_tail_by_hand():
    p = CommParams(channel_copy_gbps=50.0)
    # 1 GiB all-gather on 2 ranks: each rank copies 512 MiB out of its receive buffers,
    # 24 channels × 50 GB/s = 1.2 TB/s -> 447.4 µs.
    ag = collective_time(_coll("allgather", 1 << 30, 2), H100, params=p)
    assert ag.detail["algo"] == "ring"
    assert ag.detail["copy_tail_us"] == pytest.approx((1 << 29) / 1.2e6)
    assert ag.time * 1e6 == pytest.approx(
        ag.detail["lat_us"] + ag.detail["bw_term_us"] + ag.detail["copy_tail_us"]
    )
    # The same copy on 4 ranks is a quarter of the buffer; the link term grows to 3/4 of it.
    ag4 = collective_time(_coll("allgather", 1 << 30, 4), H100, params=p)
    assert ag4.detail["copy_tail_us"] == pytest.approx((1 << 28) / 1.2e6)
    # Broadcast's senders never stop to copy; no rate, or another algorithm: no tail.
    assert collective_time(_coll("broadcast", 1 << 30, 2), H100, params=p).detail[
        "copy_tail_us"
    ] == (0.0)
    assert collective_time(_coll("allgather", 1 << 30, 2), H100).detail["copy_tail_us"] == 0.0
    assert comm.ring_copy_tail_us("allreduce", "tree", 1 << 30, 8, 24, p) == 0.0


def test_ring_copy_tail_slows_two_ranks_most():
    """The mechanism's signature in the measurements: on 2 ranks all-gather's bus bandwidth is
    below all-reduce's, which is below broadcast's; the all-gather gap closes with more ranks."""
    p = CommParams(channel_copy_gbps=45.0)

    def busbw(coll: str, n: int) -> float:
        return collective_time(_coll(coll, 4 << 30, n), H100, params=p).detail["busbw_gbps"]

    assert busbw("allgather", 2) < busbw("allreduce", 2) < busbw("broadcast", 2)
    assert busbw("allgather", 2) < busbw("allgather", 3) < busbw("allgather", 4)
    assert busbw("broadcast", 2) == pytest.approx(busbw("broadcast", 4))


def test_misaligned_chunks_are_flagged():
    assert comm.chunk_misaligned("allgather", 1 << 30, 3)  # 357913941.33 B per rank
    assert comm.chunk_misaligned("alltoall", 3 * 1000 + 3, 3)  # 1001 B per peer
    assert not comm.chunk_misaligned("allgather", 1 << 30, 4)
    assert not comm.chunk_misaligned("reducescatter", 3 * 4096, 3)
    assert not comm.chunk_misaligned("allreduce", 1 << 30, 3)  # NCCL splits it itself
    assert collective_time(_coll("allgather", 1 << 30, 3), H100).detail["misaligned"]
