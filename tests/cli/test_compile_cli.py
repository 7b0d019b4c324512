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
