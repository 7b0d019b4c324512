"""The bad-input and silent-option sweep of the ux-fixes branch, one named case each, run through
the CLI's entry point: a group without a subcommand prints its help; options that were ignored
or accepted without meaning are refused in one line (exit 2)."""

from __future__ import annotations

import json

import pytest
from clirun import refused, run


@pytest.mark.parametrize("group", [(), ("hw",), ("models",), ("measure",), ("predict",)])
def test_a_group_without_a_subcommand_prints_its_help(capsys, group):
    code, out, err = run(capsys, *group)
    assert (code, err) == (0, ""), err[:300]
    assert out.startswith(f"Usage: gpuperf {' '.join(group)}".rstrip() + " ")
    assert "\nCommands:\n" in out  # the help as -h prints it, one line per subcommand
    assert run(capsys, *group, "--help") == (0, out, "")


@pytest.mark.parametrize("coll", ["allreduce", "allgather", "reducescatter", "broadcast"])
def test_an_unknown_nccl_algorithm_is_refused_naming_the_choices(capsys, coll):
    refused(capsys, "predict", coll, "--bytes", "1G", "--system", "dgx-h100", "--algo", "bogus",
            match="unknown algorithm 'bogus'; expected one of: tree, ring, nvls")  # fmt: skip


@pytest.mark.parametrize("option", [("--algo", "bogus"), ("--algo", "ring"), ("--proto", "LL"),
                                    ("--nvls",)])  # fmt: skip
def test_alltoall_offers_no_nccl_algorithm_protocol_or_nvls(capsys, option):
    # NCCL runs alltoall as grouped send/recv (as sendrecv): nothing of these reaches it
    refused(capsys, "predict", "alltoall", "--bytes", "1G", "--system", "dgx-h100", *option,
            match=f"No such option '{option[0]}'")  # fmt: skip


def test_a_collective_refuses_another_gpu_than_the_systems(capsys):
    args = ("predict", "allreduce", "--bytes", "1G", "--system", "dgx-h100")
    refused(capsys, *args, "--gpu", "a100", match="dgx-h100 is built of h100-sxm5-80gb; --gpu a1")
    refused(capsys, *args, "--gpu", "h200", match="is another GPU")
    code, own, err = run(capsys, *args, "--gpu", "h100", "--format", "json")
    assert code == 0, err
    assert run(capsys, *args, "--format", "json")[1] == own  # the system's own GPU: the same


def test_the_api_refuses_another_gpu_than_the_systems_for_an_op():
    from gpuperf import api
    from gpuperf.errors import InputError

    for kind, sizes in (("allreduce", dict(nbytes=1 << 30, ranks=8)), ("gemm", dict(m=4096))):
        with pytest.raises(InputError, match="is another GPU"):
            api.predict_op(kind, gpu="a100", system="dgx-h100", **sizes)
        assert api.predict_op(kind, gpu="h100", system="dgx-h100", **sizes).total_ms > 0


@pytest.mark.parametrize(
    "option, match",
    [(("--cuda-graphs",), "CUDA graphs are modelled for inference steps"),
     (("--dtype", "int8"), "training runs in bf16, fp16, fp32, tf32, fp8, fp64, not int8")],
)  # fmt: skip
def test_training_refuses_what_it_does_not_model(capsys, option, match):
    refused(capsys, "predict", "llama2-7b", "--mode", "train", *option, match=match)
    code, _, err = run(capsys, "predict", "llama2-7b", "--mode", "prefill", *option)
    assert code == 0, err  # inference takes them


def test_the_api_refuses_training_with_cuda_graphs_or_int8():
    from gpuperf import api
    from gpuperf.errors import InputError

    for kw in ({"cuda_graphs": True}, {"dtype": "int8"}):
        with pytest.raises(InputError, match="training|CUDA graphs"):
            api.predict("llama2-7b", mode="train", **kw)


def test_a_search_with_no_split_of_its_gpus_says_which_rule_each_breaks(capsys):
    # 256 GPUs of 8 a node for a 16-layer model and one sequence: tp·pp is at most 8·16
    args = ("search", "llama3.2-1b", "--gpus", "256", "--system", "dgx-h100")
    refused(capsys, *args, "--global-batch", "1",
            match="no plan of llama3.2-1b can be built on 256 GPUs of dgx-h100, as every split of "
            "them into tp·pp·dp breaks a rule: pp=32, 64, 128 or 256 exceeds its 16 layers; "
            "dp=2, 4, 8, 16, 32, 64, 128 or 256 does not divide the --global-batch 1")  # fmt: skip
    refused(capsys, *args, "--mode", "decode", "--batch", "1",
            match="exceeds its 16 layers; dp=2, 4, 8, 16, 32, 64, 128 or 256 does not divide "
            "the --batch 1")  # fmt: skip
    # stages need not divide the layers: 3 GPUs run Llama-3-8B's 32 layers as 11, 11 and 10
    code, out, err = run(capsys, "search", "llama3-8b", "--gpus", "3", "--system", "dgx-h100",
                         "--global-batch", "8", "--format", "json")  # fmt: skip
    assert code == 0, err
    assert {(p["scenario"]["tp"], p["scenario"]["pp"]) for p in json.loads(out)["plans"]} == {
        (1, 3)
    }
    # plans that were built but do not fit say so, and which memory term is over
    err = refused(capsys, "search", "llama3-70b", "--gpus", "1", "--system", "dgx-h100",
                  match="no plan of llama3-70b runs on 1 GPUs of dgx-h100: ")  # fmt: skip
    assert " do not fit (the smallest, " in err and " alone is " in err


def test_serve_refuses_tp_beside_gpus_whose_search_picks_tp(capsys):
    from gpuperf import api
    from gpuperf.errors import InputError

    args = ("serve", "llama3.2-1b", "--gpu", "h100", "--slo", "ttft=2s", "--gpus", "2")
    for tp in ("1", "2"):  # --tp 1 was as silent as --tp 2
        refused(capsys, *args, "--tp", tp, match=f"tp={tp} and gpus=2: with gpus the search")
    with pytest.raises(InputError, match="tp=2 and gpus=2"):
        api.serve_plan("llama3.2-1b", "ttft=2s", gpu="h100", gpus=2, tp=2, requests=20)
    text = " ".join(run(capsys, "serve", "--help")[1].split())
    assert "[default: 1]; not with --gpus." in text and "(so not with --tp)" in text, text


@pytest.mark.parametrize(
    "args, headers",
    [(("search", "llama3-8b", "--gpus", "3", "--system", "dgx-h100", "--global-batch", "3"),
      ("step (s)", "tok/s", "TFLOP/s/GPU", "MFU %", "bubble %", "comm %", "GiB/GPU")),
     (("predict", "allreduce", "--bytes", "1G", "--system", "dgx-h100"),
      ("latency (µs)", "copy tail (µs)", "algbw (GB/s)", "busbw (GB/s)"))],
)  # fmt: skip
def test_a_piped_table_keeps_every_column_whole(capsys, args, headers):
    code, out, err = run(capsys, *args)  # captured: not a terminal, as `| less` or `> file`
    assert code == 0, err
    assert "…" not in out, out
    for header in headers:
        assert f" {header} " in out, (header, out)
