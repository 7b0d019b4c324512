"""`--impl compile` and `--recompute op` from the command line: a prediction, one-line refusals."""

from __future__ import annotations

from clirun import refused, run


def test_compile_with_the_op_policy_predicts_an_fsdp_step(capsys):
    code, out, err = run(capsys, "predict", "model", "llama3-8b", "--mode", "train", "--impl",
                         "compile", "--recompute", "op", "--dp", "8", "--zero", "3", "--system",
                         "dgx-h100", "--global-batch", "16", "--seq", "8192", "--format",
                         "json")  # fmt: skip
    assert code == 0, err
    assert '"impl": "compile"' in out and '"recompute": "op"' in out


def test_compile_and_the_op_policy_refusals_are_one_line(capsys):
    refused(capsys, "predict", "model", "llama3-8b", "--mode", "train", "--impl", "compile",
            "--tp", "2", "--system", "dgx-h100", match="tp=2 with compiled layers")  # fmt: skip
    refused(capsys, "predict", "model", "llama3-8b", "--impl", "compile",
            match="impl=compile models training steps")  # fmt: skip
    refused(capsys, "predict", "model", "llama3-8b", "--mode", "train", "--recompute", "op",
            match="--impl eager or compile")  # fmt: skip
    refused(capsys, "predict", "model", "llama3-8b", "--mode", "train", "--impl", "eager",
            "--dtype", "fp8", match="eager fp8 training")  # fmt: skip


def test_compile_refuses_math_sdpa_models_and_op_on_moe_names_the_fix(capsys):
    refused(capsys, "predict", "model", "tests/unit/data/hf_configs/falcon-7b.json", "--mode",
            "train", "--impl", "compile", match="math SDPA")  # fmt: skip
    refused(capsys, "predict", "model", "mixtral-8x7b", "--mode", "train", "--impl", "eager",
            "--recompute", "op", match="--recompute none or full")  # fmt: skip


def test_a_training_steps_host_warning_does_not_suggest_cuda_graphs(capsys):
    args = ("predict", "model", "llama3.2-1b", "--gpu", "h100", "--mode", "train", "--impl",
            "eager", "--recompute", "op", "--seq", "64")  # fmt: skip
    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert "host" in out and "--cuda-graphs" not in out + err


def test_validate_refuses_recompute_outside_whole_model_training(capsys, tmp_path):
    import json

    tiny = tmp_path / "tiny.json"
    tiny.write_text(json.dumps({"model_type": "llama", "hidden_size": 64,
                                "intermediate_size": 128, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "num_key_value_heads": 2,
                                "vocab_size": 256, "max_position_embeddings": 64}))  # fmt: skip
    refused(capsys, "validate", str(tiny), "--impl", "eager", "--mode", "prefill", "--recompute",
            "op", "--device", "cpu", match="--recompute checkpoints a whole-model")  # fmt: skip
    # a family the split runs do not build: one line, no progress line before it
    refused(capsys, "validate", "mixtral-8x7b", "--mode", "train", "--impl", "eager", "--tp",
            "2", "--nproc", "2", "--device", "cpu", match="splits Llama-family")  # fmt: skip
