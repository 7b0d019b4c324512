"""`gpuperf validate MODEL --nproc N`: whole models as parallel plans under torchrun, for real, on
the CPU (gloo): Megatron-style and DTensor tensor parallelism, DDP and FSDP2 training steps, the
correctness check against the unsharded model, and the refusals. On GPUs the same code runs with
NCCL (benchmarks/device/multigpu_validate.py)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuperf.cli import main  # noqa: E402

TINY = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 512, "max_position_embeddings": 256}  # fmt: skip
FAST = ["--device", "cpu", "--iters", "2", "--seq", "32", "--ctx", "32", "--format", "json",
        "--impl", "eager"]  # fmt: skip


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def _for_mode(args: tuple[str, ...]) -> list[str]:
    """args without FAST's size that the run's mode does not use (validate refuses it): --ctx
    outside decode, --seq in decode (the last --seq given wins, as click takes it)."""
    argv = list(args)
    mode = argv[argv.index("--mode") + 1] if "--mode" in argv else "prefill"
    drop = "--seq" if mode == "decode" else "--ctx"
    while drop in argv:
        i = argv.index(drop)
        del argv[i : i + 2]
    return argv


def run(capsys, *args):
    try:
        main(["validate", *_for_mode(args)])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_megatron_tp_prefill_matches_the_whole_model(capsys, tiny, tmp_path):
    save = tmp_path / "tp.json"
    code, out, err = run(capsys, tiny, "--tp", "2", "--nproc", "2", *FAST, "--save", str(save))
    assert code == 0, err
    r = json.loads(out)
    assert r["implementation"] == "megatron" and r["world"] == 2
    assert len(r["samples_ms"]) == 2 and r["measured_ms"] > 0
    assert r["check_rel_err"] < 0.02  # bf16 logits of the shards vs the unsharded model
    assert json.loads(save.read_text())["plan"] == "tp2 pp1 dp1"
    assert "predicted_ms" not in r  # the CPU has no profile to predict with


@pytest.mark.parametrize("impl", ["megatron", "dtensor"])
def test_qwen2_runs_as_itself_with_its_qkv_biases(capsys, tmp_path, impl):
    """A Qwen2 config builds Qwen2ForCausalLM (q, k, v biased), not a Llama; Megatron-style
    shards slice the biases with the weights (the check against the whole model)."""
    path = tmp_path / "qwen2.json"
    path.write_text(json.dumps({**TINY, "model_type": "qwen2"}))
    code, out, err = run(capsys, str(path), "--tp", "2", "--tp-impl", impl, *FAST)
    assert code == 0, err
    r = json.loads(out)
    assert r["implementation"] == impl
    if impl == "megatron":
        assert r["check_rel_err"] < 0.02


@pytest.mark.parametrize(
    "args, what",
    [
        (["--tp", "2", "--tp-impl", "dtensor", "--mode", "decode"], "dtensor"),
        (["--dp", "2", "--mode", "train"], "ddp"),
        (["--dp", "2", "--zero", "3", "--mode", "train"], "fsdp"),
        # torchtitan's per-op checkpointing inside FSDP2's layers, whole-layer inside DDP's
        (["--dp", "2", "--zero", "3", "--mode", "train", "--recompute", "op"], "fsdp"),
        (["--dp", "2", "--mode", "train", "--recompute", "full"], "ddp"),
        # foreach AdamW over HF's tp_plan: DTensors and plain tensors in separate groups
        (["--tp", "2", "--tp-impl", "dtensor", "--mode", "train"], "dtensor"),
    ],
)
def test_implementations_run(capsys, tiny, args, what):
    code, out, err = run(capsys, tiny, *args, *FAST)
    assert code == 0, err
    r = json.loads(out)
    assert r["implementation"] == what
    assert all(s > 0 for s in r["samples_ms"])
    # each rank's host time per step, the busiest rank's median beside the step
    assert len(r["rank_host_ms"]) == len(r["samples_ms"]) and len(r["rank_host_ms"][0]) == 2
    assert 0 < r["host_ms"] <= max(r["samples_ms"]) * 1.5


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tp", "2", "--impl", "fused"], "--impl eager or compile"),
        (["--tp", "2", "--mode", "train", "--impl", "eager", "--recompute", "op"],
         "checkpointed or compiled layers in pipeline"),
        (["--mode", "train", "--impl", "eager", "--recompute", "selective"], "not one of"),
        (["--tp", "2", "--dp", "2", "--mode", "train", "--impl", "eager"], "tensor and data"),
        (["--tp", "2", "--nproc", "4", "--impl", "eager"], "--nproc 4"),
        (["--cp", "2", "--dp", "2", "--mode", "train", "--impl", "eager", "--seq", "64"],
         "context parallelism beside"),
        (["--cp", "2", "--nproc", "3", "--impl", "eager", "--seq", "64"], "tp·pp·dp·cp"),
        (["--cp", "2", "--mode", "decode", "--impl", "eager"], "prefill and train only"),
        (["--cp", "2", "--zero", "3", "--mode", "train", "--impl", "eager", "--seq", "64"],
         "with ZeRO"),
    ],
)  # fmt: skip
def test_refusals_are_one_line_exit_2(capsys, tiny, args, message):
    code, _, err = run(capsys, tiny, *args, "--device", "cpu")
    assert code == 2 and message in err and "Traceback" not in err


def test_context_parallel_on_the_cpu_is_exit_3(capsys, tiny):
    """PyTorch's ring attention wraps the CUDA SDPA kernels: on the CPU the run is refused
    before torchrun starts, saying so (GPU: tests/gpu/test_multigpu_gpu.py)."""
    code, _, err = run(capsys, tiny, "--cp", "2", "--mode", "train", *FAST)
    assert code == 3 and "CUDA" in err and "Traceback" not in err


def test_too_few_gpus_is_exit_3(capsys, tiny):
    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs")
    code, _, err = run(capsys, tiny, "--tp", "2", "--impl", "eager", "--device", "cuda")
    assert code == 3


@pytest.mark.parametrize(
    "extra, plan",
    [(["--pp", "2"], "tp1 pp2"), (["--pp", "2", "--tp", "2"], "tp2 pp2"),
     (["--tp", "2"], "tp2 pp1")],  # Megatron-style TP training: a one-stage pipeline
)  # fmt: skip
def test_pipeline_1f1b_training_runs(capsys, tiny, extra, plan):
    args = [*extra, "--mode", "train", "--batch", "4", "--micro-batch", "1", *FAST]
    if "--pp" not in extra:
        args[args.index("--micro-batch") : args.index("--micro-batch") + 2] = []
    code, out, err = run(capsys, tiny, *args)
    assert code == 0, err
    r = json.loads(out)
    world = 2 * (2 if extra.count("2") == 2 else 1)
    assert r["implementation"] == "pipeline" and r["world"] == world
    assert r["plan"].startswith(plan)


def test_a_timed_out_run_says_where_each_rank_was(tmp_path):
    from gpuperf.measure.model_run import stages

    log = tmp_path / "log"
    log.write_text("[gpuperf rank 1] build\nnoise\n[gpuperf rank 0] build\n"
                   "[default0]:[gpuperf rank 0] graph capture\n")  # fmt: skip
    assert stages(log) == "rank 0: graph capture, rank 1: build"
    log.write_text("torchrun: nothing yet\n")
    assert stages(log) == "no rank started"


SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
         "max_position_embeddings": 256, "pad_token_id": 0}  # fmt: skip


@pytest.mark.parametrize(
    "family, args, what",
    [
        ("qwen3", ["--dp", "2", "--zero", "3", "--mode", "train"], "fsdp"),  # q/k norms
        ("gemma2", ["--dp", "2", "--mode", "train", "--recompute", "full"], "ddp"),
        ("phi3", ["--nproc", "1", "--mode", "prefill"], "single"),  # fused qkv, gate/up
        ("gpt2", ["--nproc", "1", "--mode", "decode"], "single"),  # its layers are `h`
        # windows shorter than the sequence; no vocab_size: the family's default
        ("gemma3_text", ["--nproc", "1", "--mode", "train"], "single"),
    ],
)  # fmt: skip
def test_other_families_run_whole(capsys, tmp_path, family, args, what):
    """Run whole (one GPU, DDP, FSDP2), a model of any family transformers builds runs as
    itself, its decoder layers checkpointed and sharded each."""
    config = {"model_type": family, **SMALL}
    if family == "gpt2":
        config = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2,
                  "vocab_size": 256, "n_positions": 256}  # fmt: skip
    if family == "gemma3_text":
        config = {k: v for k, v in config.items() if k != "vocab_size"}
        config.update(head_dim=16, sliding_window=16)
    path = tmp_path / f"{family}.json"
    path.write_text(json.dumps(config))
    code, out, err = run(capsys, str(path), *args, *FAST)
    assert code == 0, err
    r = json.loads(out)
    assert r["implementation"] == what and all(s > 0 for s in r["samples_ms"])


def test_a_family_transformers_cannot_build_is_refused(capsys, tiny, monkeypatch):
    from gpuperf.measure import hf_causal

    monkeypatch.setattr(hf_causal, "can_build", lambda kind: False)
    code, _, err = run(capsys, tiny, "--dp", "2", "--mode", "train", *FAST)
    assert code == 2 and "has no causal LM for model_type 'llama'" in err


@pytest.mark.parametrize(
    "model, message",
    [
        ("gpt-oss-20b", "does not run PyTorch's SDPA"),  # HF runs its sinks eagerly
        ("tests/unit/data/hf_configs/gemma-3-4b-pt.json", "give its text config"),
    ],
)
def test_whole_runs_refuse_what_they_cannot_build_as_itself(capsys, model, message):
    code, _, err = run(capsys, model, "--nproc", "1", "--mode", "train", *FAST)
    assert code == 2 and message in err and "Traceback" not in err
