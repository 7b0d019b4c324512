"""Every prediction's track record (gpuperf.step.track_record): the class it falls in, the held-out
error the committed measurements give that class, and a record file that cannot drift from the
results and the model (it is regenerated here and compared)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuperf import api
from gpuperf.step import track_record
from tests.cli.clirun import run

ROOT = Path(__file__).resolve().parents[2]
RECORD = json.loads(track_record.RECORD.read_text())


def test_the_committed_record_is_what_the_results_give_now(tmp_path):
    """benchmarks/accuracy.py --write-track-record, run afresh, writes the committed file byte for
    byte: a change to the model or to the results without regenerating it fails here."""
    out = tmp_path / "record.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "accuracy.py"),
                    "--write-track-record", str(out)], check=True, capture_output=True)  # fmt: skip
    assert out.read_text() == track_record.RECORD.read_text()


def _classes(p) -> list[str]:
    return [c["class"] for c in p.extra["track_record"]["classes"]]


def _entry(p, i: int = 0) -> dict:
    return p.extra["track_record"]["classes"][i]


def test_an_eager_prefill_on_a_measured_gpu_reports_its_class_there():
    p = api.predict("llama2-7b", gpu="h100", impl="eager")
    assert _classes(p) == ["whole-model prefill", "peak memory, inference (one GPU, Hugging Face)"]
    held = RECORD["gpus"]["h100-sxm5-80gb"]["whole-model prefill"]
    assert _entry(p) == {"class": "whole-model prefill", "gpu": "h100-sxm5-80gb", **held}
    assert held["n"] >= 20 and 0 < held["median_pct"] < held["p90_pct"]


def test_decode_is_split_by_launch():
    """An eager decode step waits on its host; a CUDA graph's does not: two records."""
    eager = api.predict("llama3-8b", gpu="h200", impl="eager", mode="decode")
    graph = api.predict("llama3-8b", gpu="h200", impl="eager", mode="decode", cuda_graphs=True)
    assert _classes(eager)[0] == "whole-model decode, eager"
    assert _classes(graph)[0] == "whole-model decode, CUDA graph"
    assert _entry(graph)["median_pct"] < _entry(eager)["median_pct"]


def test_fused_kernels_on_one_gpu_report_their_kernels():
    """No whole step of fused kernels ran here: the record says so and gives its kernels'."""
    p = api.predict("llama2-7b", gpu="h100")
    assert "no whole fused-kernel step was run" in p.extra["track_record"]["basis"]
    assert _classes(p) == ["gemm LLM layer shapes", "attention prefill"]
    fp8 = api.predict("llama2-7b", gpu="h100", mode="decode", dtype="fp8")
    assert _classes(fp8) == ["gemm fp8 LLM shapes (16-8192 tokens)", "attention decode"]


def test_parallel_plans_report_the_multi_gpu_runs():
    tp = api.predict("llama3-8b", gpu="h200", impl="eager", tp=2, mode="decode")
    assert _classes(tp) == [
        "tensor-parallel decode, eager",
        "peak memory, inference (parallel plans)",
    ]
    basis = tp.extra["track_record"]["basis"]
    assert "2 or 4 h200-sxm-141gb" in basis and "torchrun" in basis
    ddp = api.predict("llama3-8b", system="dgx-h100", dp=8, mode="train", impl="eager",
                      global_batch=8)  # fmt: skip
    assert _classes(ddp)[0] == "data-parallel training (DDP, FSDP2)"
    assert _entry(ddp)["gpu"] == "h200-sxm-141gb"  # where the plans ran, said as such


def test_generate_is_a_prefill_then_decodes():
    p = api.predict("llama3-8b", gpu="h100", impl="eager", mode="generate", new_tokens=8)
    assert _classes(p)[:2] == ["whole-model prefill", "whole-model decode, eager"]


def test_inference_replicas_are_one_gpu_steps():
    p = api.predict("llama3-8b", system="dgx-h100", dp=8, impl="eager")
    assert _classes(p)[0] == "whole-model prefill"


def test_training_at_scale_reports_the_published_runs():
    dense = api.predict("llama3-70b", mode="train", system="dgx-h100", nodes=4, tp=8, pp=4,
                        global_batch=64)  # fmt: skip
    assert _classes(dense) == ["published H100 training runs, dense"]
    assert _entry(dense)["n"] == RECORD["published"]["dense"]["n"] >= 40
    moe = api.predict("mixtral-8x7b", mode="train", system="dgx-h100", nodes=2, ep=8, dp=16,
                      global_batch=64)  # fmt: skip
    assert _classes(moe) == ["published H100 training runs, mixture of experts (and hybrid)"]


def test_gpus_without_runs_say_so():
    b200 = api.predict("llama3-8b", gpu="b200", impl="eager")  # borrows the H200's parameters
    assert "not measured on b200" in b200.extra["track_record"]["basis"]
    assert _entry(b200) == {"class": "whole-model prefill", "gpu": "h200-sxm-141gb",
                            **RECORD["transfer"]["whole-model prefill"]}  # fmt: skip
    a100 = api.predict("llama3-8b", gpu="a100", impl="eager")
    assert a100.extra["track_record"]["classes"] == []
    assert "not measured" in a100.extra["track_record"]["basis"]


def test_a_calibration_of_a_measured_chip_keeps_its_record(tmp_path):
    """A user's profile of an H100 (its own file, on the built-in one) is that chip."""
    toml = tmp_path / "my-h100.toml"
    toml.write_text('name = "my-h100"\nbase = "h100-sxm5-80gb"\ndisplay_name = "mine"\n')
    p = api.predict("llama2-7b", gpu=str(toml), impl="eager")
    assert _entry(p)["gpu"] == "h100-sxm5-80gb"


def test_single_ops_report_their_kernel_class():
    p = api.predict_op("gemm", gpu="h100", m=8192, n=8192, k=8192)
    assert _classes(p) == ["gemm bf16/fp16 >=1024"]
    c = api.predict_op("allreduce", system="dgx-h100", nbytes=1 << 28, ranks=8)
    assert _classes(c) == ["collective >=1MiB"] and _entry(c)["gpu"] == "h200-sxm-141gb"


def test_the_cli_prints_it_and_its_json_carries_it(capsys):
    code, out, _ = run(capsys, "predict", "llama2-7b", "--gpu", "h100", "--impl", "eager")
    assert code == 0 and re.search(r"accuracy +whole-model prefill \d+\.\d% \(p90", out)
    assert "held-out Hugging Face runs" in out
    code, out, _ = run(capsys, "predict", "llama2-7b", "--gpu", "h100", "--format", "json")
    record = json.loads(out)["extra"]["track_record"]
    assert [c["class"] for c in record["classes"]] == ["gemm LLM layer shapes",
                                                       "attention prefill"]  # fmt: skip
    code, out, _ = run(capsys, "predict", "gemm", "16,8192", "4096", "4096", "--gpu", "h100")
    assert "gemm few tokens (M<=32)" in out and "gemm bf16/fp16 >=1024" in out
    code, out, _ = run(capsys, "predict", "allreduce", "--bytes", "1K,1G", "--system",
                       "dgx-h100", "--format", "json")  # fmt: skip
    classes = [c["class"] for c in json.loads(out)["track_record"]["classes"]]
    assert classes == ["collective <1MiB", "collective >=1MiB"]


def test_a_damaged_record_leaves_predictions_alone(monkeypatch, tmp_path):
    bad = tmp_path / "track_record.json"
    bad.write_text("{not json")
    monkeypatch.setattr(track_record, "RECORD", bad)
    track_record._record.cache_clear()
    try:
        p = api.predict("llama2-7b", gpu="h100", impl="eager")
        assert p.total_ms > 0 and p.extra["track_record"]["classes"] == []
    finally:
        track_record._record.cache_clear()


@pytest.mark.parametrize(
    "scenario, cls",
    [
        ({"mode": "train", "recompute": "full"}, "checkpointed training step"),
        ({"mode": "train"}, "training step"),
        ({"mode": "decode"}, "whole-model decode"),
        ({"mode": "generate"}, "whole-model prefill"),
    ],
)
def test_e2e_classes(scenario, cls):
    assert track_record.e2e_class(scenario) == cls


def test_the_html_report_says_it_and_skips_a_broken_one():
    from gpuperf.reports.html import render_html

    good = api.predict("llama2-7b", gpu="h100", impl="eager")
    assert "Accuracy, whole-model prefill" in render_html(good)
    good.extra["track_record"] = {"basis": "x", "classes": [{"class": 1}]}  # a saved file's
    assert "Accuracy," not in render_html(good)


@pytest.mark.parametrize(
    "kw, classes, words",
    [  # kinds no run measured say so instead of borrowing another kind's record (a review)
        (dict(model="mixtral-8x7b", system="dgx-h100", dp=8, ep=8, mode="decode",
              impl="eager"), [], "no MoE plan was run"),
        (dict(model="llama3-8b", system="dgx-h100", pp=2, mode="decode", impl="eager"), [],
         "no plan of this kind"),
        (dict(model="llama3-70b", system="dgx-h100", nodes=2, tp=8, pp=2), [],
         "no inference or eager plan past one node"),
        (dict(model="llama3-70b", mode="train", system="dgx-a100", nodes=4, tp=8, pp=4,
              global_batch=64), [], "on H100s, not this GPU"),
        (dict(model="llama3-8b", system="dgx-h100", tp=2, mode="generate", impl="eager",
              new_tokens=4), ["tensor-parallel prefill", "tensor-parallel decode, eager"], ""),
        (dict(model="llama3-8b", gpu="h100", mode="decode", weight_dtype="int4"),
         ["gemm weight-only int4/int8", "attention decode"], "no whole fused-kernel step"),
        (dict(model="llama3-8b", gpu="h100", impl="eager", dtype="fp8"),
         ["gemm fp8 LLM shapes (16-8192 tokens)", "attention prefill"],
         "no whole eager step in this format"),
        (dict(model="mixtral-8x7b", gpu="h100"),
         ["gemm LLM layer shapes", "grouped gemm (MoE experts)", "attention prefill"], ""),
    ],
)  # fmt: skip
def test_each_kind_gets_its_own_record_or_none(kw, classes, words):
    p = api.predict(kw.pop("model"), **kw)
    assert _classes(p)[: len(classes)] == classes
    assert classes or p.extra["track_record"]["basis"].startswith("not measured")
    assert words in p.extra["track_record"]["basis"]


def test_a_class_without_runs_is_named():
    p = api.predict_op("gemm", gpu="h100", m=4096, dtype="fp64")
    assert (
        _classes(p) == []
        and "no held-out runs of: gemm other (fp64)" in (p.extra["track_record"]["basis"])
    )


def test_a_serving_simulation_carries_its_engines_record():
    """vLLM-like, SGLang-like and TensorRT-LLM-like profiles: the public sample's held-out rows
    of that engine on that GPU; hf: the continuous-batching runs measured here."""
    rep = api.serve("llama3-8b", gpu="h100", engine="vllm", requests=8)
    rec = rep.track_record
    assert [c["class"] for c in rec["classes"]] == list(track_record.SERVE_PUBLIC)
    ttft = RECORD["serve"]["vllm"]["h100-sxm5-80gb"]["TTFT mean"]
    assert rec["classes"][0] == {"class": "TTFT mean", "gpu": "h100-sxm5-80gb", **ttft}
    assert "public aiconfigurator sample of vllm" in rec["basis"]
    assert rep.to_dict(per_request=False)["track_record"] == rec
    hf = api.serve("llama3.2-1b", gpu="h200", engine="hf", requests=8).track_record
    assert [c["class"] for c in hf["classes"]] == ["wall time", "TTFT p50", "TPOT p50"]
    assert {c["gpu"] for c in hf["classes"]} == {"h200-sxm-141gb"}


@pytest.mark.parametrize(
    ("engine", "gpu", "tp", "why"),
    [("trtllm", "a100", 1, "no trtllm serving run on a100-sxm4-80gb (runs on: b200, "),
     ("sglang", "b200", 1, "no sglang serving run on b200"),
     ("hf", "h100", 2, "the Hugging Face serving runs were on one GPU")],
)  # fmt: skip
def test_serving_without_runs_of_its_kind_says_not_measured(engine, gpu, tp, why):
    rec = api.serve("llama3-8b", gpu=gpu, engine=engine, tp=tp, requests=4).track_record
    assert rec["classes"] == [] and rec["basis"].startswith("not measured: " + why)


def test_a_users_engine_profile_is_not_given_the_built_ins_record(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('base = "vllm"\nstep_overhead = 0.001\n')
    rec = api.serve("llama3-8b", gpu="h100", engine=str(f), requests=4).track_record
    assert rec == {"basis": "not measured: an engine profile of the user's: the serving runs "
                   "are of the built-in ones", "classes": []}  # fmt: skip
    # the built-in's own options (a deployment's settings) keep it
    tuned = api.serve("llama3-8b", gpu="h100", engine="vllm", max_seqs=4, requests=4)
    assert tuned.track_record["classes"]


def test_serve_prints_it_in_every_format(capsys, tmp_path):
    code, out, _ = run(capsys, "serve", "llama3-8b", "--gpu", "h100", "--engine", "trtllm",
                       "--requests", "8")  # fmt: skip
    assert code == 0 and re.search(r"accuracy +TTFT mean \d+\.\d% \(p90 \d+%, n=\d+\)", out)
    code, out, _ = run(capsys, "serve", "llama3-8b", "--gpu", "h100", "--requests", "8",
                       "--format", "json")  # fmt: skip
    assert json.loads(out)["track_record"]["classes"][1]["class"] == "TPOT mean"
    page = tmp_path / "plan.html"
    code, out, _ = run(capsys, "serve", "llama3-8b", "--gpu", "h100", "--slo",
                       "ttft=2s,tpot=100ms", "--requests", "20", "-o", str(page))  # fmt: skip
    assert code == 0 and "accuracy   TTFT mean" in out
    assert "<b>Accuracy</b>: TTFT mean" in page.read_text()
    code, out, _ = run(capsys, "serve", "llama3-8b", "--gpu", "h100", "--slo",
                       "ttft=2s,tpot=100ms", "--requests", "20", "--format", "json")  # fmt: skip
    assert json.loads(out)["track_record"]["basis"].startswith("held-out rows of the public")


def test_search_says_how_sure_its_best_plan_is(capsys):
    """The best plan is predicted by the same engine as `predict`, record included."""
    args = ["search", "llama3-8b", "--system", "dgx-h100", "--gpus", "16", "--global-batch",
            "64", "--seq", "2048"]  # fmt: skip
    code, out, _ = run(capsys, *args)
    assert code == 0 and "accuracy   published H100 training runs, dense" in out
    code, out, _ = run(capsys, *args, "--format", "json")
    record = json.loads(out)["extra"]["track_record"]
    assert record["classes"][0]["class"] == "published H100 training runs, dense"
