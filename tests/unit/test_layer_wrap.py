"""gpuperf.measure.layer_wrap on the CPU: checkpointed and compiled decoder layers compute what
the plain model computes, and the per-op policy runs again exactly the matmuls gpuperf's model
says it does (op_policy_matmuls: every second one of each layer)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from gpuperf.measure.hf_causal import causal_lm  # noqa: E402
from gpuperf.measure.layer_wrap import wrap_layers  # noqa: E402
from gpuperf.workloads.config import from_hf_dict  # noqa: E402
from gpuperf.workloads.transformer_train import op_policy_matmuls, op_policy_split  # noqa: E402

TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 256, "max_position_embeddings": 64}  # fmt: skip


class CountMM(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
            self.n += 1
        return func(*args, **(kwargs or {}))


def step(recompute: str, compiled: bool = False, config: dict = TINY) -> tuple[float, list, int]:
    """(loss, gradients, aten.mm and aten.addmm calls) of one forward and backward."""
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(**config)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = causal_lm(cfg).float()
    wrap_layers(model, recompute, compiled, backend="eager")
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(1))
    count = CountMM()
    with count:
        out = model(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
    return out.loss.item(), [p.grad.clone() for p in model.parameters()], count.n


def test_checkpointed_and_compiled_layers_compute_the_same_step():
    loss, grads, _ = step("none")
    for rc, comp in (("op", False), ("full", False), ("op", True), ("none", True)):
        other, other_grads, _ = step(rc, comp)
        assert other == pytest.approx(loss, rel=1e-5)
        for a, b in zip(grads, other_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_the_op_policy_runs_again_the_matmuls_the_model_charges():
    layers, per_layer = (
        TINY["num_hidden_layers"],
        len(op_policy_matmuls(from_hf_dict(TINY, name="tiny"))),
    )
    _, _, plain = step("none")
    _, _, op = step("op")
    _, _, full = step("full")
    # every matmul again but the down projection, whose output nothing saved (the recompute
    # stops once the saved tensors are rebuilt: transformer_train._early_stop)
    assert full - plain == layers * (per_layer - 1)
    assert op - plain == layers * (per_layer // 2)  # k, o and up: every second one
    # Qwen2's biased q, k, v run as addmm, which the policy neither keeps nor counts: they run
    # again, and of o, gate, up, down the 2nd (the 4th, down, is where the recomputation
    # stops: op_policy_split)
    qwen2 = {**TINY, "model_type": "qwen2"}
    _, _, q_plain = step("none", config=qwen2)
    _, _, q_op = step("op", config=qwen2)
    again = op_policy_split(from_hf_dict(qwen2, name="qwen2"))[1]
    assert q_op - q_plain == layers * len(again) == layers * 4
    with pytest.raises(ValueError, match="recompute must be"):
        wrap_layers(None, "selective")


SMALL = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
             num_hidden_layers=2, vocab_size=256, max_position_embeddings=64)  # fmt: skip


def _family(name: str) -> dict:
    import json
    from pathlib import Path

    from gpuperf.workloads.config import PRESET_DIR

    path = Path(__file__).parent / "data" / "hf_configs" / f"{name}.json"
    d = json.loads((path if path.exists() else PRESET_DIR / f"{name}.json").read_text())
    return {**{k: v for k, v in d.items() if not k.startswith("_")}, **SMALL}


@pytest.mark.parametrize("name", ["falcon-7b", "granite-3.1-8b", "gemma2-9b", "qwen3-32b"])
def test_full_recompute_stops_before_the_down_projection_where_the_model_says(name):
    # PyTorch's checkpoint stops once the saved tensors are rebuilt: after Falcon's parallel sum
    # and Granite's residual multiplier nothing is saved (the down projection does not run
    # again); Gemma-2's post-norm saves its input (the whole layer runs again)
    from gpuperf.workloads.transformer_train import down_output_unneeded

    config = _family(name)
    cfg = from_hf_dict(config, name=name)
    _, _, plain = step("none", config=config)
    _, _, full = step("full", config=config)
    per_layer = len(op_policy_matmuls(cfg)) - down_output_unneeded(cfg)
    assert full - plain == config["num_hidden_layers"] * per_layer
