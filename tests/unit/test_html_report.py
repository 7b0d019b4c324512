"""The HTML report: hand-made predictions in, figures with hand-computed numbers out, an offline
page (plotly.js inlined once, no network reference), the op table, the hardware sources."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from gpuperf.errors import InputError
from gpuperf.hardware.loader import load_gpu
from gpuperf.perfmodel.ops_io import op_to_dict
from gpuperf.reports import html as H
from gpuperf.reports.html_data import fold_ops, join_measured, load_saved, strip_layer
from gpuperf.reports.html_figures import memory_figure, step_figure
from gpuperf.reports.html_roofline import roofline_figure
from gpuperf.step.result import Prediction
from gpuperf.workloads import single_op

H100 = load_gpu("h100")


def _row(name, kind, shape, flops, nbytes, time_ms, bound):
    return dict(name=name, layer=name.split("/")[0] if name.startswith("L") else "", kind=kind,
                shape=shape, dtype="bf16", flops=flops, bytes=nbytes,
                intensity=flops / nbytes if nbytes else 0.0, bound=bound, time_ms=time_ms,
                t_math_ms=time_ms, t_mem_ms=0.0, t_overhead_ms=0.0)  # fmt: skip


def synthetic(gpu: str = "h100-sxm5-80gb", scale: float = 1.0) -> Prediction:
    """Two layers of qkv (2 TFLOP in 4 ms: 500 TFLOP/s), norm (1 GB in 0.5 ms) and a copy."""
    rows = [_row("embed", "embedding", "8×8", 0.0, 1e6, 0.01 * scale, "memory")]
    for layer in ("L0", "L1"):
        rows += [
            _row(f"{layer}/attn/norm", "norm", "rmsnorm 8×8", 5e8, 1e9, 0.5 * scale, "memory"),
            _row(f"{layer}/attn/qkv", "gemm", "8×8×8", 2e12, 4e9, 4.0 * scale, "compute"),
            _row(f"{layer}/attn/kv_write", "copy", "64 B", 0.0, 2e8, 0.09 * scale, "memory"),
        ]
    table = pd.DataFrame(rows)
    table["share"] = table["time_ms"] / table["time_ms"].sum()
    busy = float(table["time_ms"].sum())
    return Prediction(
        table=table, total_ms=busy + 1.0, tokens_per_s=1000 / scale, mfu=0.5 / scale, hfu=0.5,
        mfu_convention="2N per token", memory={"weights": 2**34, "kv_cache": 2**32},
        memory_capacity=80 * 2**30, fits=True, warnings=["a <b>test</b> warning"], gpu=gpu,
        model="tiny", scenario={"mode": "prefill", "batch": 1, "seq": 8, "dtype": "bf16"},
        extra={"gpu_busy_ms": busy, "kernels": 7},
    )  # fmt: skip


def test_strip_layer_and_fold():
    assert strip_layer("prefill/L31/mlp/down") == "prefill/mlp/down"
    f = fold_ops(synthetic().table).set_index("name")
    assert f.loc["attn/qkv", "count"] == 2
    assert f.loc["attn/qkv", "time_ms"] == pytest.approx(8.0)
    assert f.loc["attn/qkv", "flops"] == pytest.approx(4e12)
    assert f.loc["attn/qkv", "intensity"] == pytest.approx(500.0)  # 4e12 / 8e9
    assert f.loc["attn/qkv", "layer"] == "L0–L1"
    assert f.loc["embed", "count"] == 1
    assert len(f) == 4  # embed, norm, qkv, kv_write


def test_fold_keeps_different_shapes_apart():
    t = synthetic().table
    t.loc[t["name"] == "L1/attn/qkv", "shape"] = "16×8×8"
    f = fold_ops(t)
    assert (f["name"] == "attn/qkv").sum() == 2


def _trace(fig, name):
    return next(t for t in fig.data if t.name == name)


def test_roofline_points_and_ceilings():
    item = H.items_of(synthetic())[0]
    fig, notes = roofline_figure([item])
    gemm = _trace(fig, "gemm")
    # 4e12 FLOP in 8 ms = 500 TFLOP/s at 500 FLOP/B; the largest share gets the largest marker
    assert list(gemm.x) == pytest.approx([500.0])
    assert list(gemm.y) == pytest.approx([500.0])
    assert gemm.customdata[0][1] == 2  # count of folded ops
    norm = _trace(fig, "norm")
    assert list(norm.y) == pytest.approx([1e9 / 1e-3 / 1e12])  # 1e9 FLOP in 1 ms = 1 TFLOP/s
    assert max(gemm.marker.size) > max(norm.marker.size)
    # ceilings: H100 dense bf16 989.4 TFLOP/s, HBM 3.35 TB/s -> ridge 295.3 FLOP/B
    bf16 = _trace(fig, "bf16 989 TFLOP/s")
    assert bf16.y[0] == pytest.approx(989.4)
    assert bf16.x[0] == pytest.approx(989.4e12 / 3.35e12)
    assert bf16.line.dash == "solid"  # the ops' dtype is drawn solid, the others dashed
    assert _trace(fig, "fp32 67 TFLOP/s").line.dash == "dash"
    hbm = _trace(fig, "HBM 3,350 GB/s")
    assert hbm.y[1] == pytest.approx(H100.peak_flops["fp8"] / 1e12)  # slope up to the top ridge
    ridges = _trace(fig, "ridge points (FLOP/B)")
    assert sorted(ridges.x) == pytest.approx(
        sorted(H100.peak_flops[d] / H100.hbm_bw for d in ("fp32", "tf32", "bf16", "fp8"))
    )
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert any("no arithmetic" in n and "embedding" in n and "copy" in n for n in notes)


def test_roofline_fp8_only_where_the_gpu_has_it():
    item = H.items_of(synthetic("a100-sxm4-80gb"))[0]
    fig, _ = roofline_figure([item])
    names = {t.name for t in fig.data}
    assert not any(n.startswith("fp8") for n in names if n)
    assert "bf16 312 TFLOP/s" in names  # A100 datasheet dense BF16


def test_measured_beside_predicted():
    pred = synthetic()
    measured = pd.DataFrame({"name": ["L0/attn/qkv", "L1/attn/qkv"], "measured_ms": [5.0, 5.0]})
    item = H.items_of(pred, measured=measured)[0]
    fig, _ = roofline_figure([item])
    m = _trace(fig, "measured")
    assert list(m.y) == pytest.approx([400.0])  # 4e12 FLOP in 10 ms
    line = _trace(fig, "predicted → measured")
    assert list(line.y[:2]) == pytest.approx([500.0, 400.0])
    row = item.table.set_index("name").loc["L0/attn/qkv"]
    assert row["error_pct"] == pytest.approx(-20.0)  # 4 ms predicted vs 5 measured
    assert "measured_ms" not in pred.table  # the caller's prediction is left alone


def test_join_measured_by_kind_and_shape_when_names_differ():
    meas = pd.DataFrame({"name": ["gemm 8×8×8"], "kind": ["gemm"], "shape": ["8×8×8"],
                         "measured_ms": [3.0]})  # fmt: skip
    joined = join_measured(synthetic().table, meas).set_index("name")
    assert joined.loc["L1/attn/qkv", "measured_ms"] == 3.0
    assert np.isnan(joined.loc["L0/attn/norm", "measured_ms"])


def test_step_figure_adds_host_wait_and_parallel_parts():
    pred = synthetic()
    pred.extra.update(exposed_comm_ms=2.0, bubble_ms=3.0)
    pred.total_ms += 5.0
    fig = step_figure(H.items_of(pred))
    parts = {t.name: t.x[0] for t in fig.data}
    assert parts["compute-bound kernels"] == pytest.approx(8.0)
    assert parts["memory-bound kernels"] == pytest.approx(1.01 + 0.18)
    assert parts["exposed communication"] == 2.0 and parts["pipeline bubble"] == 3.0
    assert parts["waiting on the host"] == pytest.approx(1.0)


def test_memory_figure_in_gib_against_capacity():
    fig = memory_figure(H.items_of(synthetic()))
    assert _trace(fig, "weights").x[0] == pytest.approx(16.0)
    assert _trace(fig, "kv cache").x[0] == pytest.approx(4.0)
    assert _trace(fig, "GPU capacity").x[0] == pytest.approx(80.0)


def _strip_plotly(page: str) -> str:
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    assert page.count(js) == 1, "plotly.js must be inlined exactly once"
    return page.replace(js, "")


def figure_data(page: str, fig: str) -> list[dict]:
    """The traces passed to Plotly.newPlot for div fig-<fig>."""
    m = re.search(r'Plotly\.newPlot\(\s*"fig-' + fig + r'",\s*', page)
    assert m, f"no figure {fig}"
    data, _ = json.JSONDecoder().raw_decode(page, m.end())
    return data


def _values(arr) -> list[float]:
    """A plotly JSON array: a list, or a typed array {"dtype", "bdata"} (base64)."""
    if isinstance(arr, dict):
        return np.frombuffer(base64.b64decode(arr["bdata"]), dtype=arr["dtype"]).tolist()
    return list(arr)


def test_page_is_offline_and_self_contained():
    page = H.render_html(synthetic())
    rest = _strip_plotly(page)
    assert not re.search(r"""<script[^>]*\bsrc\s*=""", rest, re.I)
    assert not re.search(r"<link\b", rest, re.I)
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//""", rest, re.I)
    assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", rest, re.I)
    assert "@import" not in rest and "MathJax" not in rest.replace("typesetMath", "")
    for fig in ("roofline", "step", "kind", "position", "memory"):
        assert f'id="fig-{fig}"' in rest
    assert rest.count("Plotly.newPlot(") == 5
    assert '"displaylogo": false' in rest and '"typesetMath": false' in rest


def test_page_has_figure_json_table_sources_and_escapes():
    page = _strip_plotly(H.render_html(synthetic()))
    # the roofline's figure JSON carries the hand-computed point
    gemm = next(t for t in figure_data(page, "roofline") if t.get("name") == "gemm")
    assert _values(gemm["x"]) == pytest.approx([500.0])
    assert _values(gemm["y"]) == pytest.approx([500.0])
    assert "<td>attn/qkv</td>" in page and "×2" in page  # folded table
    assert "<td>L1/attn/qkv</td>" in page  # every kernel
    assert 'class="data sortable"' in page and "data-dir" in page  # sortable + its script
    assert "NVIDIA H100 Tensor Core GPU datasheet" in page  # sources of the profile
    assert "a &lt;b&gt;test&lt;/b&gt; warning" in page and "<b>test</b>" not in page
    assert "2N per token" in page  # MFU convention under assumptions
    assert '<div class="k">MFU</div><div class="v">50.0<small>%</small>' in page


def test_several_gpus_compare_and_switch():
    preds = [synthetic("h100-sxm5-80gb"), synthetic("a100-sxm4-80gb", scale=2.0)]
    page = _strip_plotly(H.render_html(preds))
    assert 'id="fig-compare"' in page
    assert "h100-sxm5-80gb · fastest" in page
    fig, _ = roofline_figure(H.items_of(preds))
    labels = [b.label for b in fig.layout.updatemenus[0].buttons]
    assert labels == ["h100-sxm5-80gb", "a100-sxm4-80gb"]
    first = fig.layout.updatemenus[0].buttons[0].args[0]["visible"]
    assert len(first) == len(fig.data) and 0 < sum(first) < len(first)


def test_results_file_repredicted(tmp_path):
    ops = [single_op.gemm(4096), single_op.gemm(8192)]
    rows = [
        {"op": op_to_dict(op), "name": op.name, "kind": op.kind, "shape": op.shape,
         "dtype": op.dtype, "flops": op.cost().flops, "bytes": op.cost().bytes,
         "measured_ms": ms, "predicted_ms": 99.0}
        for op, ms in zip(ops, (0.2, 1.5), strict=True)
    ]  # fmt: skip
    env = {"gpu": "NVIDIA H100 80GB HBM3", "gpu_memory_bytes": 85e9, "torch": "2.x"}
    path = tmp_path / "gemm.json"
    path.write_text(json.dumps({"env": env, "kind": "gemm", "rows": rows}))
    item = load_saved(path)
    assert item.spec.name == "h100-sxm5-80gb"
    assert (item.table["time_ms"] != 99.0).all()  # current model, not the stored guess
    assert item.table["measured_ms"].tolist() == [0.2, 1.5]
    out = H.write_report(item, tmp_path / "r" / "m.html")
    page = out.read_text()
    assert "Measurement environment" in page and "2.x" in page
    assert "NVIDIA H100 80GB HBM3" in page


def test_saved_predict_json_round_trip(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(synthetic().to_json()))
    item = load_saved(path)
    assert item.result.total_ms == pytest.approx(synthetic().total_ms)
    assert item.result.memory["weights"] == 2**34 and item.spec.name == "h100-sxm5-80gb"


@pytest.mark.parametrize(
    ("content", "message"),
    [("not json", "not valid JSON"), ("[1]", "expected a JSON object"), ('{"rows": []}', "no rows"),
     ('{"a": 1}', "not a results file"), ('{"ops": [{"kind": "x"}]}', "need 'name'")],
)  # fmt: skip
def test_bad_saved_files(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        load_saved(path)


def test_write_report_refuses_a_directory(tmp_path):
    with pytest.raises(InputError, match="directory"):
        H.write_report(synthetic(), tmp_path)


def test_real_prediction_renders_every_kernel():
    from gpuperf import api

    p = api.predict("llama2-7b", gpu="h100", seq=512)
    page = H.render_html(p)
    kernels = page[page.index('id="kernels-0"') :]
    kernels = kernels[: kernels.index("</table>")]
    assert kernels.count("<tr>") == len(p.table) + 2  # header + rows + sum
    assert "×32" in page  # 32 layers folded


def test_plotly_not_imported_on_predict_path():
    code = (
        "import sys; from gpuperf import api; import gpuperf.cli.report_cmd; "
        "api.predict('llama2-7b', gpu='h100', seq=128); "
        "assert 'plotly' not in sys.modules, 'plotly imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_parallel_plan_step_breakdown_and_memory():
    from gpuperf import api

    r = api.predict("llama2-70b", mode="train", system="dgx-h100", nodes=8, tp=8, pp=2, dp=4,
                    seq=4096, micro_batch=1, global_batch=256)  # fmt: skip
    items = H.items_of(r)
    fig = step_figure(items)
    parts = {t.name: t.x[0] for t in fig.data}
    assert parts["compute kernels"] == pytest.approx(r.extra["breakdown_ms"]["compute"])
    assert parts["pipeline bubble"] == pytest.approx(r.extra["breakdown_ms"]["bubble"])
    assert sum(parts.values()) == pytest.approx(r.total_ms)  # the parts add up
    page = _strip_plotly(H.render_html(r))
    assert 'id="fig-step"' in page and 'id="fig-memory"' in page
    assert 'id="fig-roofline"' in page and 'id="ops"' in page  # a plan's ops are ops too
    assert "tp_comm" not in page or "exposed TP communication" in page
    assert "NVIDIA H100 SXM5 80GB" in page  # the system's GPU profile and its sources


def test_fold_keeps_dtypes_apart_and_colours_a_dtype_sweep():
    t = synthetic().table
    t.loc[t["name"] == "L1/attn/qkv", "dtype"] = "fp8"
    f = fold_ops(t)
    assert sorted(f.loc[f["name"] == "attn/qkv", "dtype"]) == ["bf16", "fp8"]
    sweep = t[t["kind"] == "gemm"]
    item = H.items_of(Prediction(table=sweep, total_ms=8.0, gpu="h100"))[0]
    fig, _ = roofline_figure([item])
    names = {tr.name for tr in fig.data}
    assert {"gemm bf16", "gemm fp8"} <= names  # one kind, several dtypes: coloured by dtype
    assert _trace(fig, "fp8 1,979 TFLOP/s").line.dash == "solid"  # both used ceilings solid
    assert _trace(fig, "tf32 495 TFLOP/s").line.dash == "dash"


@pytest.mark.parametrize(
    ("rows", "match"),
    [([1], "row 0 is int"), ([{"name": "L0/qkv", "measured_ms": "fast"}], "measured_ms must be"),
     ([{"name": "a", "measured_ms": 1.0}, {"name": "b", "measured_ms": -2}], "row 1 \\(b\\)"),
     ([{"name": ["x"], "measured_ms": 1.0}], "string 'name'"),
     ([{"name": "a", "measured_ms": 1.0, "kind": 3}], "kind must be a string")],
)  # fmt: skip
def test_malformed_measured_rows_are_input_errors(rows, match):
    from gpuperf.reports.html_data import measured_frame

    with pytest.raises(InputError, match=match):
        measured_frame({"rows": rows})
    assert len(measured_frame({"rows": [{"name": "a", "measured_ms": None}]})) == 1


_OP = {"name": "gemm", "kind": "gemm", "flops": 1e12, "bytes": 1e8, "time_ms": 2.0}


@pytest.mark.parametrize(
    ("saved", "message"),
    [({"ops": [_OP], "memory": "x"}, "'memory' must be an object"),
     ({"ops": [_OP], "warnings": 5}, "'warnings' must be a list"),
     ({"ops": [_OP], "scenario": "x"}, "'scenario' must be an object"),
     ({"ops": [_OP], "env": "x"}, "'env' must be an object"),
     ({"ops": [_OP], "model": ["x"]}, "'model' must be a string"),
     ({"ops": [_OP], "total_ms": -5}, "'total_ms' must be a finite number >= 0"),
     ({"ops": [_OP], "env": {"gpu_memory_bytes": "x"}}, "gpu_memory_bytes must be a number"),
     ({"ops": [{**_OP, "time_ms": "abc"}]}, "time_ms must be a number"),
     ({"ops": [{**_OP, "flops": float("inf")}]}, "flops must be a finite number"),
     ({"ops": [{**_OP, "time_ms": None}]}, "no op has a time_ms"),
     ({"rows": [{"name": "a", "flops": 1, "bytes": 1}]}, "no row has a measured_ms"),
     ({"rows": [{"name": "a", "flops": 1, "bytes": 1, "measured_ms": -5}]}, "measured_ms must be"),
     ({"rows": [{"name": "a", "flops": 1, "bytes": 1, "measured_ms": 1}], "env": "x"},
      "'env' must be an object")],
)  # fmt: skip
def test_saved_files_with_fields_of_the_wrong_type_are_refused(tmp_path, saved, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(saved))
    with pytest.raises(InputError, match=re.escape(message)):
        load_saved(path)
