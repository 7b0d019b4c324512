"""Pipeline parallelism of a Hugging Face Llama (Mistral, Qwen2) in plain PyTorch, with
Megatron-style tensor parallelism inside each stage: what the multi-GPU `validate` runs for
`--pp` (model_worker).

Ranks: tp innermost, then pp (stage s holds ranks s·tp ... s·tp + tp - 1), as Megatron lays them
out. Stage s holds the layers gpuperf.workloads.shard.stage_layers gives it (the first L mod pp
stages one more), the first the embedding, the last the final norm and lm_head. A stage's
activation goes to the next stage with Megatron's scatter/gather (Narayanan et al. SC21 §4.1):
each tensor-parallel rank sends 1/tp of it and the receivers all-gather it over their group; the
gradient comes back the same way.

Schedules: inference runs each micro-batch through the stages in turn (stage s receives micro-batch
i while it can, so stages overlap across micro-batches); training runs 1F1B (warm-up forwards,
one forward one backward, cool-down backwards), with the sends and receives of a step batched
(batch_isend_irecv) as Megatron's p2p_communication does, so that pairs never deadlock.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn


class Layout:
    """This rank's place: stage, tensor-parallel rank, groups and pipeline neighbours."""

    def __init__(self, pp: int, tp: int) -> None:
        rank, world = dist.get_rank(), dist.get_world_size()
        if pp * tp != world:
            raise ValueError(f"pp·tp = {pp * tp} but {world} ranks")
        self.pp, self.tp, self.rank = pp, tp, rank
        self.stage, self.tp_rank = divmod(rank, tp)
        self.group = None
        for s in range(pp):  # every rank creates every group, in the same order
            ranks = list(range(s * tp, (s + 1) * tp))
            g = dist.new_group(ranks) if tp > 1 else None
            if s == self.stage:
                self.group = g
        self.prev = rank - tp if self.stage > 0 else None
        self.next = rank + tp if self.stage < pp - 1 else None

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.pp - 1


class Stage(nn.Module):
    """One stage's share of the model (module docstring)."""

    def __init__(self, cfg: Any, lay: Layout, device: Any, dtype: Any) -> None:
        super().__init__()
        import copy

        from gpuperf.measure import tp_megatron
        from gpuperf.workloads.shard import stage_layers

        per_stage = stage_layers(cfg.num_hidden_layers, lay.pp)
        local = copy.deepcopy(cfg)
        local.num_hidden_layers = per_stage[lay.stage]
        if lay.tp > 1:
            model = tp_megatron.build(local, lay.tp, lay.tp_rank, device, dtype, lay.group)
        else:
            from gpuperf.measure.hf_causal import causal_lm

            with torch.device(device):
                model = causal_lm(local).to(dtype)
        self.lay = lay
        self.embed = model.model.embed_tokens if lay.first else None
        self.layers = model.model.layers
        self.rotary = model.model.rotary_emb
        self.norm = model.model.norm if lay.last else None
        self.head = model.lm_head if lay.last else None
        self.vocab = cfg.vocab_size

    def forward(self, x: torch.Tensor, ids: torch.Tensor, labels: torch.Tensor | None) -> Any:
        h = self.embed(ids) if self.embed is not None else x
        pos = torch.arange(h.shape[1], device=h.device)[None]
        pe = self.rotary(h, pos)
        for layer in self.layers:
            h = layer(h, attention_mask=None, position_embeddings=pe)
        if self.head is None:
            return h
        if labels is None:  # inference: the next token's logits only
            return self.head(self.norm(h[:, -1:]))
        logits = self.head(self.norm(h)).float()
        return nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, self.vocab), labels[:, 1:].reshape(-1)
        )


def _scatter(h: torch.Tensor, lay: Layout) -> torch.Tensor:
    """This tensor-parallel rank's 1/tp of the flattened activation."""
    flat = h.reshape(-1)
    return flat.chunk(lay.tp)[lay.tp_rank].contiguous() if lay.tp > 1 else flat.contiguous()


def _gather(part: torch.Tensor, shape: tuple[int, ...], lay: Layout) -> torch.Tensor:
    if lay.tp == 1:
        return part.view(shape)
    parts = [torch.empty_like(part) for _ in range(lay.tp)]
    dist.all_gather(parts, part, group=lay.group)
    return torch.cat(parts).view(shape)


def _p2p(sends: list[tuple[torch.Tensor, int]], recvs: list[tuple[torch.Tensor, int]]) -> None:
    ops = [dist.P2POp(dist.isend, t, peer) for t, peer in sends]
    ops += [dist.P2POp(dist.irecv, t, peer) for t, peer in recvs]
    if ops:
        for req in dist.batch_isend_irecv(ops):
            req.wait()


class Pipeline:
    """Runs steps of micro-batches through the stages (module docstring)."""

    def __init__(self, stage: Stage, micro: int, batch: int, seq: int, hidden: int,
                 dtype: Any, device: Any) -> None:  # fmt: skip
        self.stage, self.m, self.lay = stage, micro, stage.lay
        self.mb = batch // micro
        self.shape = (self.mb, seq, hidden)
        self.dtype, self.device = dtype, device
        chunk = self.mb * seq * hidden // self.lay.tp
        self.buf = lambda: torch.empty(chunk, dtype=dtype, device=device)  # noqa: E731

    def _recv(self, peer: int | None) -> torch.Tensor | None:
        if peer is None:
            return None
        part = self.buf()
        _p2p([], [(part, peer)])
        return _gather(part, self.shape, self.lay)

    def infer(self, ids: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for i in range(self.m):
                x = self._recv(self.lay.prev)
                out = self.stage(x, ids[i], None)
                if self.lay.next is not None:
                    _p2p([(_scatter(out, self.lay), self.lay.next)], [])

    def train(self, ids: list[torch.Tensor]) -> None:
        """One 1F1B step over the micro-batches (gradients accumulate; no optimizer here)."""
        lay, m = self.lay, self.m
        warm = min(lay.pp - lay.stage - 1, m)
        inputs: list[torch.Tensor | None] = []
        outputs: list[torch.Tensor] = []

        def forward(i: int, x: torch.Tensor | None) -> None:
            if x is not None:
                x.requires_grad_(True)
            out = self.stage(x, ids[i], ids[i] if lay.last else None)
            inputs.append(x)
            outputs.append(out)

        def backward(grad: torch.Tensor | None) -> torch.Tensor | None:
            x, out = inputs.pop(0), outputs.pop(0)
            torch.autograd.backward(out, grad_tensors=None if lay.last else grad)
            return x.grad if x is not None else None

        for i in range(warm):
            forward(i, self._recv(lay.prev))
            if lay.next is not None:
                _p2p([(_scatter(outputs[-1].detach(), lay), lay.next)], [])
        x = self._recv(lay.prev) if warm < m else None
        for i in range(warm, m):
            forward(i, x)
            grad = None
            if lay.next is not None:  # send this activation, receive the oldest's gradient
                part = self.buf()
                _p2p([(_scatter(outputs[-1].detach(), lay), lay.next)], [(part, lay.next)])
                grad = _gather(part, self.shape, lay)
            gx = backward(grad)
            last = i == m - 1
            if lay.prev is not None:  # send the gradient back, receive the next activation
                part = None if last else self.buf()
                _p2p([(_scatter(gx, lay), lay.prev)], [] if last else [(part, lay.prev)])
                x = None if last else _gather(part, self.shape, lay)
        for _ in range(warm):
            part = self.buf()
            _p2p([], [(part, lay.next)])
            gx = backward(_gather(part, self.shape, lay))
            if lay.prev is not None:
                _p2p([(_scatter(gx, lay), lay.prev)], [])
