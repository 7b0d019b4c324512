"""Megatron-style TP of a Hugging Face Llama on the CPU (2 gloo ranks): every weight's gradient
after one training step equals the unsharded model's (the slice this rank holds), so the "f" and
"g" functions sit where the backward needs them (the lm_head's "f" included)."""

from __future__ import annotations

import os
import socket

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
        "max_position_embeddings": 64}  # fmt: skip


def _worker(rank: int, world: int, port: int, errors) -> None:
    import torch.distributed as dist
    from transformers import LlamaConfig, LlamaForCausalLM

    from gpuperf.measure import tp_megatron

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        cfg = LlamaConfig(**TINY, attn_implementation="eager")
        full = LlamaForCausalLM(cfg).float()
        model = tp_megatron.build(cfg, world, rank, "cpu", torch.float32)
        tp_megatron.shard_from(model, full, world, rank)
        ids = torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
        full(input_ids=ids, labels=ids).loss.backward()
        model(input_ids=ids, labels=ids).loss.backward()
        whole = dict(full.named_parameters())
        for name, p in model.named_parameters():
            g = whole[name].grad
            if g.shape != p.grad.shape:  # a sharded weight: this rank's slice
                dim = next(d for d in range(g.dim()) if g.shape[d] != p.grad.shape[d])
                g = g.chunk(world, dim=dim)[rank]
            if not torch.allclose(p.grad, g, atol=1e-5, rtol=1e-3):
                errors.put(f"rank {rank} {name}: max |Δ| {(p.grad - g).abs().max():.2e}")
    except Exception as exc:  # noqa: BLE001 - reported to the test
        errors.put(f"rank {rank}: {exc!r}")
    finally:
        dist.destroy_process_group()


def test_megatron_tp_gradients_match_the_whole_model():
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    errors = ctx.Queue()
    mp.start_processes(_worker, args=(2, port, errors), nprocs=2, start_method="spawn")
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert not found, "\n".join(found)
