"""NCCL's own cost model ("tuner"), re-implemented: which (algorithm, protocol) NCCL picks and how
long it predicts a collective takes.

Sources (modeling-facts §3): NVIDIA/nccl src/graph/tuning.cc (ncclTopoTuneModel,
ncclTopoGetAlgoTime), src/graph/search.cc (channel search), src/graph/topo.h (link bandwidths).
All constants live in `NcclTables` with the NCCL version they were read from; nothing numeric is
inline below except the structural factors NCCL itself hard-codes (0.92, 0.85, 7/9, 120/128,
3.8, 1.4), commented at their use.

Simplifications against the real search (docs/collectives.md):
- One channel search for ring and tree graphs alike, on an idealized topology: every GPU reaches
  every other GPU of its node through NVSwitch (or PCIe when it has no NVLink), and owns one NIC on
  a rail-optimized fabric. The search picks the per-channel speed from NCCL's speed table that
  maximizes nChannels × speed, as NCCL's pass 1 does, then applies NCCL's channel duplication rule.
- No CollNet (SHARP), no channel/thread trimming for small messages, no FP8 ring penalty.
- NVLS uses the ring graph's channels (NCCL searches a separate NVLS graph).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

Algo = Literal["tree", "ring", "nvls", "nvlstree", "pat"]
Proto = Literal["LL", "LL128", "Simple"]
Func = Literal["allreduce", "allgather", "reducescatter", "broadcast"]
ALGOS: tuple[Algo, ...] = ("tree", "ring", "nvls", "nvlstree", "pat")
PROTOS: tuple[Proto, ...] = ("LL", "LL128", "Simple")
_P = {"LL": 0, "LL128": 1, "Simple": 2}
ARCH_INDEX = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}

Triple = tuple[float, float, float]


@dataclass(frozen=True, slots=True)
class NcclTables:
    """Constants of NCCL's tuner and topology search, in NCCL's units (µs, GB/s = 1e9 B/s)."""

    version: str = "2.30.7 (NVIDIA/nccl master 5067397c, src/graph/tuning.cc, search.cc, topo.h)"
    # baseLat[algo][proto] (LL, LL128, Simple)
    base_lat: dict[str, Triple] = field(
        default_factory=lambda: {
            "tree": (6.8, 14.0, 8.4),
            "ring": (6.6, 14.0, 8.4),
            "nvls": (0.0, 0.0, 0.0),
            "nvlstree": (0.0, 0.0, 0.0),
            "pat": (8.0, 8.0, 8.0),
        }
    )
    # hwLat[hw][algo][proto]; hw = nvlink | pci | net
    hw_lat: dict[str, dict[str, Triple]] = field(
        default_factory=lambda: {
            "nvlink": {
                "tree": (0.6, 1.25, 4.0),
                "ring": (0.6, 1.9, 3.4),
                "nvls": (0.0, 0.0, 25.0),
                "nvlstree": (0.0, 0.0, 25.0),
                "pat": (0.0, 0.0, 4.0),
            },
            "pci": {
                "tree": (1.0, 1.9, 4.0),
                "ring": (1.0, 2.5, 5.7),
                "nvls": (0.0, 0.0, 0.0),
                "nvlstree": (0.0, 0.0, 0.0),
                "pat": (0.0, 0.0, 4.0),
            },
            "net": {
                "tree": (5.0, 8.5, 14.0),
                "ring": (2.7, 4.0, 14.0),
                "nvls": (0.0, 0.0, 18.0),
                "nvlstree": (0.0, 0.0, 20.9),
                "pat": (0.0, 0.0, 14.0),
            },
        }
    )
    # Per arch (volta, ampere, hopper, blackwell); triples are (1 node, 2 nodes, >2 nodes).
    ll_max_bw_single_node: tuple[float, ...] = (39.0, 87.7, 141.0, 282.0)
    # Multi-node rows are read by CPU vendor, not GPU arch: (2 nodes, >2 nodes).
    ll_max_bw_multi_node: dict[str, tuple[float, float]] = field(
        default_factory=lambda: {"intel": (39.0, 20.4), "amd": (22.5, 19.0)}
    )
    per_ch_max_ring_ll128_bw: tuple[float, ...] = (20.0, 20.0, 36.7, 40.0)
    per_ch_max_tree_ll128_bw: tuple[Triple, ...] = (
        (20.0, 20.0, 20.0),
        (20.0, 20.0, 20.0),
        (36.7, 36.7, 29.0),
        (55.6, 31.67, 20.0),
    )
    per_ch_max_tree_bw: tuple[Triple, ...] = (
        (26.5, 18.5, 10.0),
        (24.0, 23.6, 17.8),
        (38.7, 41.4, 36.0),
        (70.0, 42.8, 24.0),
    )
    per_ch_max_nvlstree_bw: tuple[Triple, ...] = (
        (0.0, 0.0, 0.0),
        (0.0, 0.0, 0.0),
        (0.0, 57.7, 45.5),
        (0.0, 96.0, 80.0),
    )
    nvls_efficiency: tuple[float, ...] = (0.0, 0.0, 0.85, 0.74)
    # treeCorrectionFactor[proto][log2(nBytes/64)], 64 B .. 256 MB+
    tree_correction: tuple[tuple[float, ...], ...] = (
        (1, 1, 1, 1, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1, 1, 1, 1, 1),
        (1, 1, 1, 1, 1, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1, 1, 1),
        (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9,
         .9, .9),
    )  # fmt: skip
    net_overhead_us: dict[str, float] = field(default_factory=lambda: {"intel": 1.0, "amd": 2.0})
    # topo.h: NVLink GB/s per link by arch, as NCCL's topology search counts it.
    nvlink_link_bw: dict[str, float] = field(
        default_factory=lambda: {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
    )
    # Per-direction datasheet GB/s of one NVLink, to count links from a profile's nvlink_bw.
    nvlink_link_datasheet_bw: dict[str, float] = field(
        default_factory=lambda: {"volta": 25.0, "ampere": 25.0, "hopper": 25.0, "blackwell": 50.0}
    )
    # topo.h PCI bw = width × code / 80: Gen4 x16 24 GB/s, Gen5 x16 48 (= 0.75 of the raw rate).
    pci_bw_factor: float = 0.75
    # search.cc per-channel speeds tried, highest first (sm90 / sm100 tables; older archs: one).
    speeds_intra: dict[str, tuple[float, ...]] = field(
        default_factory=lambda: {
            "default": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
            "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
            "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
        }
    )
    speeds_inter: dict[str, tuple[float, ...]] = field(
        default_factory=lambda: {
            "default": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0),
            "hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0),
            "blackwell": (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5),
        }
    )
    max_channels: int = 16  # MAXCHANNELS/2: the most channels one search returns before duplication


NCCL = NcclTables()


@dataclass(frozen=True, slots=True)
class Topo:
    """What the tuner needs to know about the ranks of one communicator."""

    ranks: int
    nodes: int
    arch: str  # volta | ampere | hopper | blackwell (others are treated as ampere)
    intra_hw: Literal["nvlink", "pci"]
    intra_bw: float  # GB/s per GPU into the node's fabric, NCCL units
    nic_bw: float  # GB/s per GPU to the network (min of NIC and its PCIe path), NCCL units
    cpu: Literal["intel", "amd"] = "intel"
    nvswitch: bool = True

    @property
    def ppn(self) -> int:
        return self.ranks // self.nodes

    @property
    def cc90(self) -> bool:
        return self.arch in ("hopper", "blackwell")


@dataclass(frozen=True, slots=True)
class Graph:
    """The outcome of NCCL's channel search: channels and per-channel bandwidths (GB/s)."""

    channels: int
    bw_intra: float
    bw_inter: float
    same_channels: bool


def search_graph(topo: Topo, t: NcclTables = NCCL) -> Graph:
    """nChannels and per-channel speed, as NCCL's search.cc finds them on an idealized topology."""
    key = topo.arch if topo.arch in ("hopper", "blackwell") else "default"
    multi = topo.nodes > 1
    speeds = (t.speeds_inter if multi else t.speeds_intra)[key]
    best = (0, 0.0)
    for s in speeds:
        # Each channel is a ring through all ppn GPUs of the node: ppn-1 NVLink hops out of ppn GPUs
        # per node leave each GPU's fabric link carrying (ppn-1)/ppn of a channel on average.
        share = (topo.ppn - 1) / topo.ppn if multi else 1.0
        n = t.max_channels
        if share > 0:
            n = min(n, int(topo.intra_bw / (s * share) + 1e-9))
        if multi:  # one NIC per GPU on its own rail: each carries floor(nic/s) channels
            n = min(n, topo.ppn * int(topo.nic_bw / s + 1e-9))
        if n * s > best[0] * best[1] + 1e-9:  # ties keep the faster channel, found first
            best = (n, s)
    channels, speed = best
    if channels == 0:  # slower than every speed in the table: one channel at the link rate
        channels, speed = 1, min(topo.intra_bw, topo.nic_bw) if multi else topo.intra_bw
    # search.cc: duplicate channels when fast enough (Hopper+: not when < 50 GB/s with > 4 channels)
    dup = speed >= 25.0 and not (topo.cc90 and speed < 50.0 and channels > 4)
    if dup:
        channels, speed = min(2 * channels, 2 * t.max_channels), speed / 2
    return Graph(channels, speed, speed, same_channels=not multi)


def runtime_channels(g: Graph, t: NcclTables = NCCL) -> int:
    """Channels a ring collective runs on: connect.cc (ncclTopoPostset) doubles the searched rings,
    up to MAXCHANNELS. The tuner's bandwidth uses the searched count (g.channels) × its speed;
    NCCL_DEBUG reports this one (24 on 2 or 4 H200s: 6 × 60 GB/s searched, duplicated to 12 × 30,
    doubled)."""
    return min(2 * t.max_channels, 2 * g.channels)


def _nodes_index(nodes: int) -> int:
    return 0 if nodes == 1 else (1 if nodes == 2 else 2)


def _nsteps(func: Func, n: int) -> int:
    return 2 * (n - 1) if func == "allreduce" else (n - 1 if func != "broadcast" else n)


def algo_supported(func: Func, algo: Algo, proto: Proto, topo: Topo, nvls: bool) -> bool:
    """Whether NCCL would consider (algo, proto) for this collective on this topology."""
    if func == "broadcast" and algo != "ring":
        return False
    if func in ("allgather", "reducescatter") and algo not in ("ring", "nvls", "pat"):
        return False
    if func == "allreduce" and algo == "pat":
        return False
    if algo == "pat" and (topo.ppn != 1 or topo.nodes == 1):
        return False
    if algo in ("nvls", "nvlstree"):
        if not (nvls and topo.cc90 and topo.nvswitch and topo.intra_hw == "nvlink"):
            return False
        if proto != "Simple" or topo.ppn < 2:
            return False
        if algo == "nvls" and topo.nodes > 1:  # multi-node NVLS needs CollNet (SHARP)
            return False
        if algo == "nvlstree" and (topo.nodes == 1 or func != "allreduce"):
            return False
    # LL128 needs NVLink inside the node (tuning.cc enables it on NVL paths, PXB/PXN to the NIC).
    return not (proto == "LL128" and topo.intra_hw != "nvlink")


def bandwidth(func: Func, algo: Algo, proto: Proto, topo: Topo, g: Graph, t: NcclTables = NCCL):
    """(busBw, algBw) in GB/s as ncclTopoTuneModel computes them (before the tree correction)."""
    ai = ARCH_INDEX.get(topo.arch, 1)
    ni = _nodes_index(topo.nodes)
    n, nch = topo.ranks, g.channels
    bw = g.bw_intra if topo.nodes <= 2 else g.bw_inter
    if algo in ("nvls", "nvlstree"):
        eff = t.nvls_efficiency[ai]
        intra = g.bw_intra * eff * (nch - 1) / nch
        intra *= 2 if func == "allreduce" else (topo.ppn - 1) / topo.ppn
        inter = g.bw_inter * (2 if algo == "nvlstree" and topo.nodes <= 2 else 1)
        bw = min(intra, inter) if topo.nodes > 1 else intra
        if algo == "nvlstree":
            bw = min(bw, t.per_ch_max_nvlstree_bw[ai][ni])
    bus = nch * bw
    if topo.nodes == 1:
        ll_max = t.ll_max_bw_single_node[ai]
    else:
        ll_max = t.ll_max_bw_multi_node[topo.cpu][0 if topo.nodes == 2 else 1]
    if algo == "ring" and proto == "LL":
        bus = min(ll_max, bus * 0.5)  # LL: 8 B of flag per 8 B of data
    if algo == "ring" and proto == "LL128":
        bus = min(bus * 0.92, nch * t.per_ch_max_ring_ll128_bw[ai])
    if algo == "tree" and func == "allreduce":
        bus = min(bus * 0.92, nch * t.per_ch_max_tree_bw[ai][ni])
    if algo == "tree" and proto == "LL":
        bus = min(bus / 3.8, ll_max)
    if algo == "tree" and proto == "LL128":
        ratio = 7.0 / 9.0 if topo.nodes == 1 else 120.0 / 128.0
        bus = min(bus * ratio, nch * t.per_ch_max_tree_ll128_bw[ai][ni])
    if algo == "tree" and topo.cc90:
        bus *= 0.85  # Hopper+ search degrades BALANCED_TREE to TREE
    if algo == "pat":
        bus *= 0.75
    # busBw -> algBw, except for non-ring AllGather/ReduceScatter
    if func in ("allgather", "reducescatter") and algo != "ring":
        return bus, bus
    if algo in ("ring", "nvls", "nvlstree"):
        return bus, bus * n / _nsteps(func, n)
    return bus, bus * 0.5


def latency(func: Func, algo: Algo, proto: Proto, topo: Topo, g: Graph, t: NcclTables = NCCL):
    """Latency (µs) as ncclTopoTuneModel computes it."""
    p = _P[proto]
    n, nodes, ppn = topo.ranks, topo.nodes, topo.ppn
    intra_lat = t.hw_lat[topo.intra_hw][algo][p]
    inter_lat = t.hw_lat["net"]["tree" if ppn == 1 else algo][p]
    lat = t.base_lat[algo][p]
    log_nodes = int(math.log2(nodes)) if nodes > 1 else 0
    if algo == "ring":
        nsteps = _nsteps(func, n)
        if func == "broadcast":
            hop = t.hw_lat[topo.intra_hw]["tree" if proto == "Simple" else "ring"][p]
            return lat + (t.hw_lat[topo.intra_hw]["ring"][p] if g.same_channels else nsteps * hop)
        inter_steps = 0
        if nodes > 1:
            inter_steps = 2 * (nodes - 1) if func == "allreduce" else nodes - 1
            overhead = t.net_overhead_us[topo.cpu] * (3 if proto == "Simple" else 1)
            intra_lat = max(intra_lat, overhead)
        return lat + (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat
    if algo == "tree":
        return lat + 2 * ((ppn - 1) * intra_lat + log_nodes * inter_lat)
    if algo == "nvls":
        return intra_lat + (inter_lat if nodes > 1 else 0.0)
    if algo == "nvlstree":
        return lat + intra_lat + 2 * log_nodes * inter_lat
    # pat
    return lat + log_nodes * inter_lat / 3.5 + 2.8 * n


def tree_correction(nbytes: float, proto: Proto, t: NcclTables = NCCL) -> float:
    """treeCorrectionFactor at log2(nBytes/64). NCCL steps at powers of two; we interpolate between
    its entries (and to 1.0 past the table) so predicted time never falls as the size grows."""
    table = t.tree_correction[_P[proto]]
    x = math.log2(max(nbytes, 64) / 64)
    i = int(x)
    if i >= len(table):
        return 1.0
    nxt = table[i + 1] if i + 1 < len(table) else 1.0
    return table[i] + (x - i) * (nxt - table[i])


def algo_time_us(
    func: Func, algo: Algo, proto: Proto, nbytes: float, topo: Topo, g: Graph, t: NcclTables = NCCL
) -> tuple[float, float, float]:
    """(latency µs, busBw GB/s, algBw GB/s) after ncclTopoGetAlgoTime's corrections.

    `nbytes` is NCCL's nBytes: count × typesize, × nRanks for AllGather/ReduceScatter.
    """
    bus, alg = bandwidth(func, algo, proto, topo, g, t)
    lat = latency(func, algo, proto, topo, g, t)
    if algo == "tree" and func == "allreduce":
        alg *= tree_correction(nbytes, proto, t)
    if (
        algo == "ring"
        and proto == "Simple"
        and func == "allreduce"
        and topo.nodes > 1
        and nbytes / (g.channels * topo.ranks) >= 64
    ):
        lat *= 1.4 if topo.arch in ("ampere", "hopper", "blackwell") else 1.9  # ring plateau
    return lat, bus, alg
