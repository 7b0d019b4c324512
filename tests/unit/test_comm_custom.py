"""Serving engines' custom all-reduce (perfmodel.comm_custom): the published H100 table it comes
from, where it applies, and how a scenario, a plan, the CLI and the serving engines reach it."""

from __future__ import annotations

import json

import pytest

from gpuperf import api
from gpuperf.cli import main
from gpuperf.errors import InputError
from gpuperf.hardware.loader import load_gpu, load_system
from gpuperf.perfmodel.comm import collective_time
from gpuperf.perfmodel.comm_custom import custom_allreduce_time
from gpuperf.perfmodel.ops import Collective
from gpuperf.step.cost import Coster, in_graph
from gpuperf.step.serve_engines import load_engine
from gpuperf.step.serve_run import Server
from gpuperf.workloads.config import load_model
from gpuperf.workloads.scenario import Scenario

# sgl-project/sglang#2904, H100, custom all-reduce (TRT-LLM-derived), bf16: (ranks, bytes) -> us
PUBLISHED = {
    (2, 512): 3.7, (4, 512): 4.8, (8, 512): 5.9,
    (2, 32768): 4.5, (4, 32768): 4.8, (8, 32768): 7.8,
    (2, 262144): 7.9, (4, 262144): 13.9, (8, 262144): 16.7,
    (2, 524288): 12.5, (4, 524288): 20.2, (8, 524288): 22.1,
    (2, 1048576): 19.9, (4, 1048576): 31.1, (8, 1048576): 33.8,
}  # fmt: skip


def _ar(nbytes: int, ranks: int, name: str = "L0/mlp/down.allreduce") -> Collective:
    return Collective(name, "allreduce", nbytes, ranks, "bf16")


def test_the_model_follows_the_published_h100_table():
    """Its three constants come from this table: where the custom kernel is the faster path the
    model lands within 21% of every point (median under 10%); where NCCL's ring is predicted
    faster (large tensors) the model takes it, below the table."""
    h100 = load_gpu("h100")
    errors = []
    for (p, n), us in PUBLISHED.items():
        t = custom_allreduce_time(_ar(n, p), h100, None)
        got = t.time * 1e6
        if t.detail.get("algo") == "custom":
            errors.append(abs(got - us) / us)
        else:
            assert got < us, (p, n, got, us)
    assert len(errors) >= 9
    assert max(errors) < 0.21
    assert sorted(errors)[len(errors) // 2] < 0.10


def test_small_all_reduces_are_several_times_faster_than_ncccls_ring():
    """A 64 KiB all-reduce over 8 H200s (a decode step of a 70B model at 4 tokens): NCCL's ring
    in a CUDA graph ~28 us, the engines' kernel ~8 us."""
    gpu = in_graph(load_gpu("h200"))
    op = _ar(65536, 8)
    nccl, custom = collective_time(op, gpu, None).time, custom_allreduce_time(op, gpu, None).time
    assert custom < nccl / 2
    assert 5e-6 < custom < 10e-6


@pytest.mark.parametrize(
    ("op", "system"),
    [
        (_ar(16 << 20, 8), None),  # beyond the engines' 8 MiB buffer
        (Collective("x", "allgather", 65536, 8, "bf16"), None),  # not an all-reduce
        (Collective("x", "allreduce", 65536, 16, "bf16", 2), "dgx-h100"),  # across nodes
    ],
)
def test_nccl_where_the_engines_fall_back_to_it(op, system):
    gpu = load_gpu("h100")
    sysspec = load_system(system) if system else None
    want = collective_time(op, gpu, sysspec).time
    assert custom_allreduce_time(op, gpu, sysspec).time == want


def test_never_slower_than_nccl():
    gpu = in_graph(load_gpu("h200"))
    for p in (2, 4, 8):
        for n in (512, 1 << 16, 1 << 20, 4 << 20, 8 << 20):
            op = _ar(n, p)
            assert custom_allreduce_time(op, gpu, None).time <= collective_time(op, gpu, None).time


def test_without_nvlink_it_is_nccl():
    gpu = load_gpu("l40s")
    op = _ar(65536, 2)
    assert custom_allreduce_time(op, gpu, None).time == collective_time(op, gpu, None).time


def test_only_tensor_parallel_all_reduces_take_the_custom_kernel():
    """A data-parallel gradient all-reduce of the same shape stays NCCL's (the Coster keys the
    two apart)."""
    gpu = load_gpu("h200")
    coster = Coster(gpu, None, Scenario(mode="decode", tp=8, tp_allreduce="custom"))
    tp_row = coster.row(_ar(65536, 8))
    dp_row = coster.row(_ar(65536, 8, name="dp/grad_allreduce"))
    assert tp_row[7] < dp_row[7] / 2
    assert dp_row[7] == pytest.approx(collective_time(_ar(65536, 8), gpu, None).time * 1e3)


def test_a_scenario_refuses_it_without_tensor_parallelism_and_names_it():
    with pytest.raises(InputError, match="tp > 1"):
        Scenario(tp_allreduce="custom")
    with pytest.raises(InputError, match="tp_allreduce"):
        Scenario(tp=2, tp_allreduce="mpi")  # type: ignore[arg-type]
    assert Scenario(tp=2, tp_allreduce="custom").label().endswith("custom-ar")


def test_a_decode_step_with_it_is_faster_and_the_api_says_what_the_cli_says(capsys):
    opts = dict(gpu="h200", mode="decode", batch=4, ctx=1024, tp=8, cuda_graphs=True)
    nccl = api.predict("llama3-70b", **opts).total_ms
    custom = api.predict("llama3-70b", tp_allreduce="custom", **opts).total_ms
    # 160 all-reduces of 64 KiB: ~20 us each saved
    assert 1.5 < nccl - custom < 5.0
    with pytest.raises(SystemExit) as exc:
        main(["predict", "llama3-70b", "--gpu", "h200", "--mode", "decode", "--batch", "4",
              "--ctx", "1024", "--tp", "8", "--cuda-graphs", "--tp-allreduce", "custom",
              "--format", "json"])  # fmt: skip
    assert exc.value.code in (0, None)
    assert json.loads(capsys.readouterr().out)["total_ms"] == pytest.approx(custom, rel=1e-12)


def test_the_cli_refuses_it_on_one_gpu_in_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["predict", "llama3-8b", "--tp-allreduce", "custom"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "tp > 1" in err and len(err.splitlines()) == 1


def test_vllm_and_trtllm_run_it_and_hugging_face_does_not():
    assert load_engine("vllm").tp_allreduce == "custom"
    assert load_engine("trtllm").tp_allreduce == "custom"
    assert load_engine("hf").tp_allreduce == "nccl"
    with pytest.raises(InputError, match="tp_allreduce must be nccl or custom"):
        load_engine("vllm", tp_allreduce="gloo")
    cfg, gpu = load_model("llama3-8b"), load_gpu("h200")
    assert Server(cfg, gpu, None, "vllm", tp=2).timer.base.tp_allreduce == "custom"
    assert Server(cfg, gpu, None, "vllm", tp=1).timer.base.tp_allreduce == "nccl"
    assert Server(cfg, gpu, None, "hf", tp=2).timer.base.tp_allreduce == "nccl"


def _decode_step(model: str, tp: int, **engine: object) -> float:
    prof = load_engine("trtllm", **engine)
    server = Server(load_model(model), load_gpu("h200"), None, prof, tp=tp)
    return server.timer.step_s((), 8, 8 * 1024, 8)


def test_trtllm_fuses_llamas_all_reduce_with_the_norm_after_it():
    """TensorRT-LLM's Llama carries the residual add, RMSNorm and fp8 quantization in each
    tensor-parallel all-reduce: a decode step of 8 sequences loses two kernels per layer."""
    assert load_engine("trtllm").allreduce_norm == ("llama",)
    assert load_engine("vllm").allreduce_norm == ()
    fused = _decode_step("llama3-8b", 2)
    apart = _decode_step("llama3-8b", 2, allreduce_norm=())
    plain = _decode_step("llama3-8b", 2, allreduce_norm=(), fused_kernels=())
    assert fused < apart < plain
    # 2 norms x 32 layers of a few microseconds each
    assert 0.1e-3 < apart - fused < 1.0e-3


def test_the_all_reduce_fusion_needs_tensor_parallelism_and_a_family_that_has_it():
    assert _decode_step("llama3-8b", 1) == _decode_step("llama3-8b", 1, allreduce_norm=())
    assert _decode_step("qwen3-32b", 2) == _decode_step("qwen3-32b", 2, allreduce_norm=())


def test_a_fused_kernel_keeps_its_bytes_in_a_prefill():
    """Fused into another kernel a norm over 8192 tokens still streams its 2 x 8192 x 4096 x 2
    bytes: the prefill step loses only launches and floors, well under 1%."""
    cfg, gpu = load_model("llama3-8b"), load_gpu("h200")
    fused = Server(cfg, gpu, None, "trtllm", tp=2).timer.step_s(((8192, 0),), 0, 0, 1)
    plain = Server(cfg, gpu, None, load_engine("trtllm", allreduce_norm=()), tp=2)
    t = plain.timer.step_s(((8192, 0),), 0, 0, 1)
    assert fused < t < fused * 1.01


def test_a_profile_names_fused_kernels_as_a_list():
    with pytest.raises(InputError, match="fused_kernels must be a list of names"):
        load_engine("trtllm", fused_kernels="attn/rope")


def test_with_nvlink_sharp_allowed_it_is_never_slower_than_nccl_with_it():
    opts = dict(system="dgx-h100", tp=8, mode="prefill", seq=8192, nvls=True)
    nvls = api.predict("llama3-70b", **opts).total_ms
    assert api.predict("llama3-70b", tp_allreduce="custom", **opts).total_ms <= nvls


@pytest.mark.parametrize(("key", "value"), [("custom_ar_busbw", 0.0), ("custom_ar_a0_s", -1.0)])
def test_a_profile_with_impossible_constants_is_refused_in_one_line(key, value):
    from dataclasses import replace

    gpu = load_gpu("h200")
    bad = replace(gpu, params=replace(gpu.params, extra={**gpu.params.extra, key: value}))
    with pytest.raises(InputError, match=key):
        custom_allreduce_time(_ar(65536, 8), bad, None)


def test_beyond_two_gpus_it_needs_all_to_all_nvlink():
    """vLLM turns its kernel off for more than two GPUs that NVLink does not join all to all
    (a system without NVSwitch); two bridged GPUs keep it."""
    from dataclasses import replace

    gpu, dgx = load_gpu("h100"), load_system("dgx-h100")
    bridged = replace(dgx, nvswitch=False)
    four, two = _ar(65536, 4), _ar(65536, 2)
    assert (
        custom_allreduce_time(four, gpu, bridged).time == collective_time(four, gpu, bridged).time
    )
    assert custom_allreduce_time(two, gpu, bridged).time < collective_time(two, gpu, bridged).time
    assert custom_allreduce_time(four, gpu, dgx).time < collective_time(four, gpu, dgx).time


def test_dtensor_tensor_parallelism_refuses_it():
    with pytest.raises(InputError, match="tp_impl=megatron"):
        Scenario(tp=2, tp_impl="dtensor", tp_allreduce="custom")


def test_one_gpus_op_list_of_a_custom_plan_builds():
    from gpuperf.workloads.transformer import build_ops

    ops = build_ops(load_model("llama3-8b"), Scenario(mode="decode", tp=2, tp_allreduce="custom"))
    assert not any(op.kind == "collective" for op in ops)


def test_only_memory_bound_kernels_fuse_and_the_first_layer_fuses_after_its_attention():
    cfg, gpu = load_model("llama3-8b"), load_gpu("h200")
    gemms = ["attn/qkv", "mlp/down", "attn/core", "attn/out.allreduce"]
    named = Server(cfg, gpu, None, load_engine("trtllm", fused_kernels=gemms), tp=2)
    plain = Server(cfg, gpu, None, load_engine("trtllm", fused_kernels=()), tp=2)
    assert named.timer.step_s((), 8, 8192, 8) == plain.timer.step_s((), 8, 8192, 8)
    from gpuperf.workloads.step_work import build

    timer = Server(cfg, gpu, None, "trtllm", tp=2).timer
    parts = build(cfg, timer.base, timer.where.groups).stages[0].fwd
    first, later = (next(p for p in parts if p.layer0 == k) for k in (0, 1))
    fused = [first.ops[i].name for i in timer._fused(first)]  # noqa: SLF001
    assert "mlp/norm" in fused and "attn/norm" not in fused  # after the embedding: its own
    fused = [later.ops[i].name for i in timer._fused(later)]  # noqa: SLF001
    assert {"attn/norm", "mlp/norm"} <= set(fused)
