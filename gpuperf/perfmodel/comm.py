"""Collective and point-to-point communication time: NCCL's tuner on the system's topology, plus
the plain α-β formulas (modeling-facts §5) for reference.

`collective_time` answers what NCCL would pick (algorithm, protocol) and how long it takes, with
sizes in nccl-tests' convention (Collective.nbytes = the "size" column), so algbw/busbw compare
directly with nccl-tests output. Calibratable knobs (`CommParams`): an efficiency on bandwidth,
a scale on latency, a floor per call, and the rate at which one channel copies out of its receive
buffer (the ring copy tail below); a GPU profile sets them in `[model.extra]` as `comm_bw_eff`,
`comm_lat_scale`, `comm_floor_s` and `comm_channel_copy_bw`.

The ring copy tail. NCCL runs a ring collective as a loop; in each pass a channel's thread block
does its steps one after another: sends (and receive-reduce-sends) that move a chunk over the link,
then, for all-gather, reduce-scatter and all-reduce, a last step that only copies the chunk that
arrived from its receive buffer into the user's output (`recv`, or `recvReduceCopy` for
reduce-scatter). No link transfer of that channel overlaps that copy. Per rank the last steps copy
nbytes / ranks, at `channels × comm_channel_copy_bw`. It weighs most on 2 ranks, where every other
step is one: an all-gather's chunk crosses the link once and is copied once. Broadcast has no such
step on the ranks that send (only the last rank copies, while the others keep sending).
NCCL's own model has no such term: on 2 H200s it predicts all-gather at all-reduce's bus bandwidth,
and the measured one is 15% lower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from gpuperf.errors import InputError
from gpuperf.hardware.spec import GpuSpec, SystemSpec
from gpuperf.perfmodel import comm_nccl as nccl
from gpuperf.perfmodel.ops import P2P, Collective
from gpuperf.perfmodel.optime import OpTime


@dataclass(frozen=True, slots=True)
class P2pTables:
    """Point-to-point constants. NCCL has no tuner for send/recv; these are assumptions built
    from the ring tables (one hop: base + hwLat), to calibrate against sendrecv/alltoall runs."""

    ll_threshold_bytes: int = 16384  # NCCL_P2P_LL_THRESHOLD default: LL below, Simple above
    ll_bw_fraction: float = 0.5  # LL moves 8 B of data per 16 B line
    alltoall_per_peer_us: float = 0.5  # (assumed) issue cost per peer of the grouped send/recv


@dataclass(frozen=True, slots=True)
class CommParams:
    """Calibratable parts of the communication model (defaults: NCCL's own model, uncalibrated)."""

    bw_eff: float = 1.0  # measured / NCCL-modeled algorithm bandwidth
    lat_scale: float = 1.0  # measured / NCCL-modeled latency
    # The shortest a collective call takes end to end as measured through torch.distributed
    # (launch and completion of the NCCL kernel): time = max(floor, latency + bytes / bandwidth).
    floor_us: float = 0.0
    # GB/s at which one channel copies a received chunk into the output (the ring copy tail; see
    # the module docstring). 0: no tail, NCCL's own model.
    channel_copy_gbps: float = 0.0
    cpu: Literal["intel", "amd"] = "intel"  # NCCL reads multi-node LL caps and net overhead by CPU
    tables: nccl.NcclTables = field(default_factory=lambda: nccl.NCCL)
    p2p: P2pTables = field(default_factory=P2pTables)


def comm_params(gpu: GpuSpec) -> CommParams:
    """CommParams from the GPU profile's `[model.extra]` (comm_bw_eff, comm_lat_scale,
    comm_floor_s, comm_channel_copy_bw)."""
    extra = gpu.params.extra
    return CommParams(
        bw_eff=float(extra.get("comm_bw_eff", 1.0)),
        lat_scale=float(extra.get("comm_lat_scale", 1.0)),
        floor_us=float(extra.get("comm_floor_s", 0.0)) * 1e6,
        channel_copy_gbps=float(extra.get("comm_channel_copy_bw", 0.0)) / 1e9,
    )


# Collectives whose ring pass ends with a copy-only step on every rank (the ring copy tail).
_RING_COPY_TAIL = ("allgather", "reducescatter", "allreduce")


def chunk_misaligned(coll: str, nbytes: float, ranks: int) -> bool:
    """Whether each rank's chunk (size / ranks, nccl-tests' convention) of an all-gather,
    reduce-scatter or all-to-all misses 16-byte alignment. NCCL then runs 0.4-0.9x as fast as
    aligned (3 H200s, benchmarks/results/h200-sxm-141gb/*_unaligned.json); not modeled."""
    return coll in ("allgather", "reducescatter", "alltoall") and (nbytes / ranks) % 16 != 0


def ring_copy_tail_us(
    coll: str, algo: str, nbytes: float, ranks: int, channels: int, params: CommParams
) -> float:
    """µs of the ring copy tail (module docstring): nbytes / ranks copied per rank, not overlapped
    with the channel's link transfers. 0 for other algorithms or collectives, or with no rate."""
    if algo != "ring" or coll not in _RING_COPY_TAIL or params.channel_copy_gbps <= 0:
        return 0.0
    return nbytes / ranks / (1e3 * channels * params.channel_copy_gbps)


# --- topology -------------------------------------------------------------------------------------


def topology(
    ranks: int,
    gpu: GpuSpec,
    system: SystemSpec | None = None,
    *,
    nodes: int | None = None,
    cpu: Literal["intel", "amd"] = "intel",
    tables: nccl.NcclTables = nccl.NCCL,
) -> nccl.Topo:
    """The communicator's shape. With a system: ranks ≤ gpus_per_node is one node, otherwise
    ceil(ranks / gpus_per_node) nodes (or `nodes`, e.g. one rank per node for a DP group under TP),
    one NIC per GPU. Without: one node of `ranks` GPUs joined by gpu.nvlink_bw through NVSwitch
    (PCIe if 0, or beyond the gpu.nvlink_gpus an NVLink bridge joins)."""
    if ranks < 1:
        raise InputError(f"number of ranks must be positive, got {ranks}")
    gpn = system.gpus_per_node if system else ranks
    if nodes is None:
        nodes = max(1, math.ceil(ranks / gpn))
    if nodes > 1 and system is None:
        raise InputError("more than one node needs a system (--system) to know the network")
    if nodes < 1 or ranks % nodes:
        raise InputError(f"{ranks} ranks cannot be spread evenly over {nodes} nodes")
    if ranks // nodes > gpn:
        name = system.name if system else "the node"
        raise InputError(f"{ranks // nodes} ranks per node but {name} has {gpn} GPUs per node")
    arch = gpu.arch if gpu.arch in nccl.ARCH_INDEX else "ampere"
    nvlink = system.nvlink_bw if system else gpu.nvlink_bw
    bridged = system is None and gpu.nvlink_gpus > 0  # a PCIe card's NVLink bridge
    if bridged and ranks > gpu.nvlink_gpus:  # a ring through every GPU crosses PCIe
        nvlink = 0.0
    pci = gpu.pcie_bw * tables.pci_bw_factor / 1e9
    if nvlink > 0:
        links = nvlink / 1e9 / tables.nvlink_link_datasheet_bw.get(arch, 25.0)
        intra_bw, hw = links * tables.nvlink_link_bw.get(arch, 20.0), "nvlink"
    else:
        intra_bw, hw = pci, "pci"
    nic_bw = 0.0
    if system is not None and system.nics_per_node > 0:
        nic_bw = min(system.nic_bw / 1e9, pci) * min(1.0, system.nics_per_node / gpn)
    if nodes > 1 and nic_bw <= 0:
        name = system.name if system else "the node"
        raise InputError(f"system {name} has no compute NICs; it cannot span nodes")
    nvswitch = system.nvswitch if system else not bridged
    return nccl.Topo(ranks, nodes, arch, hw, intra_bw, nic_bw, cpu, nvswitch)  # type: ignore[arg-type]


# --- nccl-tests conventions -----------------------------------------------------------------------

BUSBW_COLLS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv")


def busbw_factor(coll: str, ranks: int) -> float:
    """nccl-tests busbw / algbw (doc/PERFORMANCE.md)."""
    n = ranks
    if coll == "allreduce":
        return 2 * (n - 1) / n
    if coll in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    if coll in ("broadcast", "sendrecv", "reduce"):
        return 1.0
    raise InputError(f"unknown collective {coll!r}; expected one of: {', '.join(BUSBW_COLLS)}")


def _parse(value: str | None, choices: tuple[str, ...], what: str) -> str | None:
    if value is None:
        return None
    by_lower = {c.lower(): c for c in choices}
    if value.lower() not in by_lower:
        raise InputError(f"unknown {what} {value!r}; expected one of: {', '.join(choices)}")
    return by_lower[value.lower()]


def _optime(
    coll,
    nbytes,
    ranks,
    lat_us,
    bw_us,
    bus_gbps,
    algo,
    proto,
    topo,
    channels,
    floor_us=0.0,
    copy_us=0.0,
) -> OpTime:
    t = max(floor_us, lat_us + bw_us + copy_us) * 1e-6
    algbw = nbytes / t / 1e9 if t > 0 else 0.0
    detail = {
        "algo": algo,
        "proto": proto,
        "lat_us": lat_us,
        "bw_term_us": bw_us,
        "copy_tail_us": copy_us,
        "floor_us": floor_us,
        "bw_gbps": bus_gbps,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * busbw_factor(coll, ranks) if ranks > 1 else 0.0,
        "nodes": topo.nodes if topo else 1,
        "ranks": ranks,
        "channels": channels,
        "misaligned": ranks > 1 and chunk_misaligned(coll, nbytes, ranks),
    }
    return OpTime(time=t, bound="comm", t_comm=t, detail=detail)


# --- public API -----------------------------------------------------------------------------------


def collective_time(
    op: Collective,
    gpu: GpuSpec,
    system: SystemSpec | None = None,
    *,
    nvls: bool = False,
    algo: str | None = None,
    proto: str | None = None,
    nodes: int | None = None,
    params: CommParams | None = None,
) -> OpTime:
    """Predicted time of a collective as NCCL would run it (see module docstring).

    algo/proto force NCCL_ALGO/NCCL_PROTO; NVLS is considered only with nvls=True. The choice is
    NCCL's argmin on its own (uncalibrated) model; the reported time applies `params`.
    """
    if op.coll == "alltoall" and (algo is not None or proto is not None):
        forced = f"--algo {algo!r}" if algo is not None else f"--proto {proto!r}"
        raise InputError(  # NCCL_ALGO and NCCL_PROTO do not reach NCCL's alltoall
            "alltoall has no NCCL algorithm or protocol to force (NCCL runs it as grouped "
            f"send/recv, algo p2p, and picks LL or Simple by size): drop {forced}"
        )
    algo = _parse(algo, nccl.ALGOS, "algorithm")
    proto = _parse(proto, nccl.PROTOS, "protocol")
    params = params or comm_params(gpu)
    nodes = nodes if nodes is not None else (op.nodes or None)
    topo = topology(op.ranks, gpu, system, nodes=nodes, cpu=params.cpu, tables=params.tables)
    if op.ranks == 1:
        return _optime(op.coll, op.nbytes, 1, 0.0, 0.0, 0.0, "none", "none", topo, 0)
    if op.coll == "alltoall":
        if op.net_bytes is not None:
            return _token_dispatch(op, gpu, system, topo, params)
        return _alltoall(op, topo, params)
    graph = nccl.search_graph(topo, params.tables)
    func: nccl.Func = op.coll  # type: ignore[assignment]
    best = None
    for a in [algo] if algo else nccl.ALGOS:
        for p in [proto] if proto else nccl.PROTOS:
            if not nccl.algo_supported(func, a, p, topo, nvls):  # type: ignore[arg-type]
                continue
            lat, bus, alg = nccl.algo_time_us(func, a, p, op.nbytes, topo, graph, params.tables)  # type: ignore[arg-type]
            t = lat + op.nbytes / (1e3 * alg)
            if best is None or t < best[0]:
                best = (t, a, p, lat, bus, alg)
    if best is None:
        why = "" if nvls or algo not in ("nvls", "nvlstree") else " (NVLS needs --nvls)"
        raise InputError(
            f"NCCL has no {algo or 'algorithm'}/{proto or 'protocol'} for {op.coll} on "
            f"{op.ranks} ranks over {topo.nodes} node(s){why}"
        )
    _, a, p, lat, bus, alg = best
    lat_us = lat * params.lat_scale
    bw_us = op.nbytes / (1e3 * alg * params.bw_eff)
    channels = nccl.runtime_channels(graph, params.tables)
    copy_us = ring_copy_tail_us(op.coll, a, op.nbytes, op.ranks, channels, params)
    return _optime(
        op.coll, op.nbytes, op.ranks, lat_us, bw_us, bus * params.bw_eff, a, p, topo,
        channels, params.floor_us, copy_us,
    )  # fmt: skip


def _p2p_terms(
    nbytes: float, bw_gbps: float, hw: str, params: CommParams, per_peer: float | None = None
) -> tuple[float, float, str]:
    """(latency µs, bandwidth µs, protocol) of a send/recv of nbytes over a link of bw_gbps (NCCL
    units). LL is allowed while each peer's message is under NCCL's P2P LL threshold; the faster
    protocol wins (NCCL switches by size alone, but min() keeps time monotone in size)."""
    t, pt = params.tables, params.p2p
    per_peer = nbytes if per_peer is None else per_peer
    best = None
    for p, frac in ((2, 1.0), (0, pt.ll_bw_fraction)):
        if p == 0 and per_peer > pt.ll_threshold_bytes:
            continue
        lat = (t.base_lat["ring"][p] + t.hw_lat[hw]["ring"][p]) * params.lat_scale
        bw_us = nbytes / (1e3 * bw_gbps * frac * params.bw_eff)
        if best is None or lat + bw_us < best[0] + best[1]:
            best = (lat, bw_us, "LL" if p == 0 else "Simple")
    return best  # type: ignore[return-value]


def p2p_time(
    op: P2P,
    gpu: GpuSpec,
    system: SystemSpec | None = None,
    *,
    inter_node: bool = False,
    params: CommParams | None = None,
) -> OpTime:
    """One send/recv of op.nbytes between two GPUs: over NVLink (PCIe) in a node, or over the
    sender's NIC when inter_node (which needs a system). busbw = algbw, as nccl-tests sendrecv."""
    params = params or comm_params(gpu)
    if inter_node or op.inter_node:
        if system is None:
            raise InputError("an inter-node send needs a system (--system)")
        topo = topology(2, gpu, system, nodes=2, cpu=params.cpu, tables=params.tables)
        bw, hw = topo.nic_bw, "net"
    else:
        topo = topology(2, gpu, system, nodes=1, cpu=params.cpu, tables=params.tables)
        bw, hw = topo.intra_bw, topo.intra_hw
    lat, bw_us, proto = _p2p_terms(op.nbytes, bw, hw, params)
    return _optime(
        "sendrecv",
        op.nbytes,
        2,
        lat,
        bw_us,
        bw * params.bw_eff,
        "p2p",
        proto,
        topo,
        1,
        params.floor_us,
    )


def _alltoall(op: Collective, topo: nccl.Topo, params: CommParams) -> OpTime:
    """Alltoall as NCCL runs it: grouped send/recv to all peers at once. Each rank sends
    nbytes/ranks to every peer: (ppn-1)/ranks of its buffer over NVLink, (ranks-ppn)/ranks over its
    NIC; the two proceed in parallel, the slower sets the bandwidth term (modeling-facts §5)."""
    n, ppn = topo.ranks, topo.ppn
    intra_bytes = op.nbytes * (ppn - 1) / n
    inter_bytes = op.nbytes * (n - ppn) / n
    if inter_bytes:  # the NIC is the bottleneck: express it as an equivalent rate on all bytes
        hw, bw_bus = "net", topo.nic_bw
        eff_bw = topo.nic_bw * op.nbytes / inter_bytes
        if intra_bytes:
            eff_bw = min(eff_bw, topo.intra_bw * op.nbytes / intra_bytes)
    else:
        hw, bw_bus = topo.intra_hw, topo.intra_bw
        eff_bw = topo.intra_bw * op.nbytes / intra_bytes
    lat, bw_us, proto = _p2p_terms(op.nbytes, eff_bw, hw, params, per_peer=op.nbytes / n)
    lat += (n - 1) * params.p2p.alltoall_per_peer_us * params.lat_scale
    bus = bw_bus * params.bw_eff
    return _optime(
        "alltoall", op.nbytes, n, lat, bw_us, bus, "p2p", proto, topo, 0, params.floor_us
    )


# DeepEP's normal (high-throughput) kernels as its README tables them (H800: NVLink 200 GB/s a
# direction, one 400 Gb/s CX7 NIC, ~50 GB/s, per GPU; 4,096 tokens of 7,168, top-8 of 256
# experts): in one node 153 GB/s dispatch and 158 GB/s combine counted over the tokens each GPU
# receives (its own included), 0.77 of the link; across nodes 43 (EP16) to 58 GB/s (EP32) over
# each token once per node it goes to (its own included: tests/test_internode.py,
# num_rdma_token_sent), ~0.9 of the NIC (a user's H200 pair, DeepEP issue #493: 41-44 GB/s).
# HybridEP (Megatron-Core's flex dispatcher's other backend) is taken to move the same bytes at
# the same rates.
DEEPEP_NVLINK_FRAC = 153 / 200
DEEPEP_NIC_FRAC = 0.9


def _token_dispatch(
    op: Collective, gpu: GpuSpec, system: SystemSpec | None, topo: nccl.Topo, params: CommParams
) -> OpTime:
    """An MoE dispatch or combine as DeepEP and HybridEP run it (Collective.net_bytes): each token
    crosses NVLink once per GPU it goes to and, across nodes, the NIC once per node it goes to
    (then NVLink forwards it to that node's GPUs). The two stages pipeline: the slower sets the
    time. Latency: one NCCL-like hop over the slower medium."""
    # PCIe where the topology found no NVLink joining every rank (none, or a 2-GPU bridge)
    nvlink = gpu.pcie_bw if topo.intra_hw == "pci" else (system or gpu).nvlink_bw
    bw_us = op.nbytes / (nvlink * DEEPEP_NVLINK_FRAC) * 1e6
    hw, bus = topo.intra_hw, nvlink * DEEPEP_NVLINK_FRAC / 1e9
    if topo.nodes > 1 and op.net_bytes:
        nic = topo.nic_bw * 1e9 * DEEPEP_NIC_FRAC
        net_us = op.net_bytes / nic * 1e6
        if net_us > bw_us:
            bw_us, hw, bus = net_us, "net", nic / 1e9
    t = params.tables
    lat = (t.base_lat["ring"][2] + t.hw_lat[hw]["ring"][2]) * params.lat_scale
    return _optime("alltoall", op.nbytes, topo.ranks, lat, bw_us, bus, "deepep", "Simple", topo,
                   0, params.floor_us)  # fmt: skip


# --- α-β reference formulas (seconds; n bytes, a latency s, b s/byte, c s/byte of reduction) ------


def ring_allreduce(p: int, n: float, a: float, b: float, c: float = 0.0) -> float:
    """2(p-1)a + 2((p-1)/p) n b + ((p-1)/p) n c (Patarasuk & Yuan 2009)."""
    return 2 * (p - 1) * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * c


def ring_allgather(p: int, n: float, a: float, b: float) -> float:
    """(p-1)a + ((p-1)/p) n b, n the total gathered size (Thakur et al. 2005)."""
    return (p - 1) * a + (p - 1) / p * n * b


def ring_reducescatter(p: int, n: float, a: float, b: float, c: float = 0.0) -> float:
    """(p-1)a + ((p-1)/p) n (b + c), n the total input size."""
    return (p - 1) * a + (p - 1) / p * n * (b + c)


def recursive_doubling_allreduce(p: int, n: float, a: float, b: float, c: float = 0.0) -> float:
    """lg p (a + n b + n c): latency-optimal, bandwidth-poor."""
    return math.ceil(math.log2(p)) * (a + n * b + n * c) if p > 1 else 0.0


def rabenseifner_allreduce(p: int, n: float, a: float, b: float, c: float = 0.0) -> float:
    """2 lg p a + 2((p-1)/p) n b + ((p-1)/p) n c (reduce-scatter halving + allgather doubling)."""
    return 2 * math.ceil(math.log2(p)) * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * c


def double_binary_tree_allreduce(p: int, n: float, a: float, b: float) -> float:
    """~2 lg p a + 2 n b: two complementary trees each carry n/2, reduce up then broadcast down
    (Sanders, Speck & Träff 2009; NCCL 2.4)."""
    return 2 * math.ceil(math.log2(p)) * a + 2 * n * b if p > 1 else 0.0


def binomial_broadcast(p: int, n: float, a: float, b: float) -> float:
    """ceil(lg p)(a + n b)."""
    return math.ceil(math.log2(p)) * (a + n * b) if p > 1 else 0.0


def pairwise_alltoall(p: int, n: float, a: float, b: float) -> float:
    """(p-1)a + ((p-1)/p) n b, n the bytes each rank sends in total (its own share stays home)."""
    return (p - 1) * a + (p - 1) / p * n * b


def hierarchical_allreduce(
    g: int, nodes: int, n: float, a_intra: float, b_intra: float, a_inter: float, b_inter: float
) -> float:
    """Reduce-scatter in the node, g parallel inter-node ring allreduces on n/g, allgather in the
    node (modeling-facts §5)."""
    intra = 2 * ring_reducescatter(g, n, a_intra, b_intra) if g > 1 else 0.0
    inter = ring_allreduce(nodes, n / g, a_inter, b_inter) if nodes > 1 else 0.0
    return intra + inter
