"""Whole-model FLOPs of build_ops against torch's FlopCounterMode on a real llama-like module."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from gpuperf.perfmodel.ops import Attention, Gemm  # noqa: E402
from gpuperf.workloads.config import ModelConfig  # noqa: E402
from gpuperf.workloads.scenario import Scenario  # noqa: E402
from gpuperf.workloads.transformer import build_ops  # noqa: E402

CFG = ModelConfig(name="t", hidden_size=128, intermediate_size=352, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=2, vocab_size=500)  # fmt: skip


class Layer(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        h, d = c.hidden, c.hd
        self.c = c
        self.q = nn.Linear(h, c.heads * d, bias=False)
        self.k = nn.Linear(h, c.kv_heads * d, bias=False)
        self.v = nn.Linear(h, c.kv_heads * d, bias=False)
        self.o = nn.Linear(c.heads * d, h, bias=False)
        self.gate = nn.Linear(h, c.intermediate, bias=False)
        self.up = nn.Linear(h, c.intermediate, bias=False)
        self.down = nn.Linear(c.intermediate, h, bias=False)
        self.n1, self.n2 = nn.RMSNorm(h), nn.RMSNorm(h)

    def forward(self, x):
        b, s, _ = x.shape
        c, rep = self.c, self.c.heads // self.c.kv_heads
        y = self.n1(x)
        q = self.q(y).view(b, s, c.heads, c.hd).transpose(1, 2)
        k = self.k(y).view(b, s, c.kv_heads, c.hd).transpose(1, 2).repeat_interleave(rep, 1)
        v = self.v(y).view(b, s, c.kv_heads, c.hd).transpose(1, 2).repeat_interleave(rep, 1)
        # Written out (not SDPA) so that FlopCounterMode sees the two bmm's on the CPU too.
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        p = (q @ k.transpose(-1, -2) / c.hd**0.5).masked_fill(~mask, float("-inf")).softmax(-1)
        a = p @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Model(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.embed = nn.Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.layers))
        self.norm = nn.RMSNorm(c.hidden)
        self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)

    def forward(self, ids, last_only=True):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        return self.lm_head(x[:, -1:] if last_only else x)


def test_param_count_matches_torch():
    model = Model(CFG)
    assert sum(p.numel() for p in model.parameters()) == CFG.param_count()


@pytest.mark.parametrize("mode", ["prefill", "train"])
def test_flops_match_flop_counter(mode):
    b, s = 2, 64
    model = Model(CFG)
    ids = torch.randint(0, CFG.vocab, (b, s))
    with FlopCounterMode(display=False) as fc:
        out = model(ids, last_only=mode == "prefill")
        if mode == "train":
            out.float().logsumexp(-1).sum().backward()
    counts = {str(k): v for k, v in fc.get_flop_counts()["Global"].items()}
    ops = build_ops(CFG, Scenario(mode=mode, batch=b, seq=s, impl="eager"))  # vocab unpadded
    gemm = sum(op.cost().flops for op in ops if isinstance(op, Gemm))
    assert gemm == counts["aten.mm"]  # every linear layer, forward, dgrad and wgrad
    # Attention: torch multiplies the full s x s square (masking after); ours counts the causal
    # pairs. Backward: torch's bmm autograd costs 2x the forward; FlashAttention's 2.5x (it
    # recomputes QK^T).
    fwd = [op for op in ops if isinstance(op, Attention) and not op.backward]
    full = sum(op.cost().flops * s * s / op.attended_pairs() for op in fwd)
    assert counts["aten.bmm"] == full * (3 if mode == "train" else 1)
    bwd = [op for op in ops if isinstance(op, Attention) and op.backward]
    assert sum(op.cost().flops for op in bwd) == 2.5 * sum(op.cost().flops for op in fwd) * (
        mode == "train"
    )
