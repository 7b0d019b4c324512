"""benchmarks/measurements_doc.py: the tables of docs/measurements.md (hand-written, tables between
markers) and docs/collectives-accuracy.md from the committed real runs, and a tiny synthetic results
folder that round-trips (measured = predicted × 1.25, so every error is −20 %)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import measurements_doc as md  # noqa: E402

from gpuperf.hardware.loader import load_gpu  # noqa: E402
from gpuperf.perfmodel.ops import Collective, Copy, Elementwise, Gemm  # noqa: E402
from gpuperf.perfmodel.ops_io import op_to_dict  # noqa: E402
from gpuperf.perfmodel.roofline import op_time  # noqa: E402

GPU = "h100-sxm5-80gb"


def header_row(doc: str, title: str) -> str:
    """The first table header line after a '### title' heading."""
    part = doc.split(f"### {title}\n", 1)[1]
    return next(line for line in part.splitlines() if line.startswith("| "))


def column(text: str, name: str) -> list[str]:
    """The cells of one column of the table in `text` (one generated table)."""
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    cells = [[c.strip() for c in ln.strip().strip("|").split(" | ")] for ln in lines]
    i = cells[0].index(name)
    return [c[i] for c in cells[1:]]


# --- committed files -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tabs() -> dict[str, str]:
    return md.tables(md.RESULTS)


@pytest.fixture(scope="module")
def doc(tabs) -> str:
    """docs/measurements.md with its tables regenerated from the committed runs."""
    return md.render(md.DOCS["measurements"].read_text(encoding="utf-8"), tabs)


@pytest.fixture(scope="module")
def coll_doc() -> str:
    return md.collectives_doc(md.RESULTS)


def test_every_gpu_folder_has_its_sections(doc):
    for gpu in ("h100-sxm5-80gb", "h200-sxm-141gb"):
        part = doc.split(f"(`{gpu}`)", 1)[1]
        for title in ("Environment", "GEMM, square sizes", "GEMM wave-boundary sweep",
                      "GEMM, misaligned vs aligned", "LLM-layer GEMMs",
                      "Attention prefill (TFLOP/s)", "Attention decode (GB/s)",
                      "Memory-bound ops by size (GB/s)", "Timer cross-check",
                      "Copy bandwidth vs datasheet", "Whole-model runs", "Host probe",
                      "Launch costs per kernel"):  # fmt: skip
            assert f"### {title}\n" in part, (gpu, title)
        assert f"Source: `benchmarks/results/{gpu}/gemm.json`." in part


def test_every_table_has_a_place_and_every_place_a_table(tabs):
    text = md.DOCS["measurements"].read_text(encoding="utf-8")
    assert md.unplaced(text, tabs) == []  # a new results file needs a marker in the doc
    md.render(text, tabs)  # a marker without data stops with its name (SystemExit)
    with pytest.raises(SystemExit, match="no-such-table"):
        md.render(
            "<!-- gpuperf:table h100-sxm5-80gb/no-such-table -->\n<!-- /gpuperf:table -->", tabs
        )


def test_prose_is_kept_only_the_marked_tables_change(doc):
    text = md.DOCS["measurements"].read_text(encoding="utf-8")
    outside = [md.MARKER.sub("", x) for x in (text, doc)]
    assert outside[0] == outside[1]  # every word outside the markers is the hand-written one
    assert "Row-major A (M×K) and B (K×N)" in doc  # the prose lives in the .md


def test_expected_columns(doc, coll_doc):
    assert header_row(doc, "GEMM, square sizes") == (
        "| dtype | M=N=K | measured (µs) | measured TFLOP/s | predicted TFLOP/s | "
        "measured % of peak | error | timer |"
    )
    assert header_row(doc, "GEMM wave-boundary sweep").startswith(
        "| N | 2048×N×4096 measured (µs) | predicted (µs) | waves | error | 4096×N×4096 measured"
    )
    assert "× aligned (measured)" in header_row(doc, "GEMM, misaligned vs aligned")
    assert header_row(doc, "Timer cross-check") == (
        "| M×N×K | our timer (µs) | do_bench (µs) | ours vs do_bench |"
    )
    assert "| " + " | ".join(md.COLL_HEAD) + " |" in coll_doc


def test_h100_numbers_come_from_the_files(doc):
    h100 = doc.split("(`h100-sxm5-80gb`)", 1)[1].split("(`h200-sxm-141gb`)")[0]
    # gemm.json: bf16 4096³ measured 0.17960 ms -> 2·4096³ / 179.6 µs = 765 TFLOP/s, 77 % of 989.4.
    line = next(x for x in h100.splitlines() if x.startswith("| bf16 | 4096 | 180 | 765 |"))
    assert "| 77% |" in line
    # crosscheck.json: 1×4096×4096 ours 0.012019 ms, do_bench 0.023392 ms -> −48.6 %.
    assert "| 1×4096×4096 | 12.0 | 23.4 | -49% |" in h100
    # copy 1 GiB: 3034.5 GB/s of the profile's 3350 GB/s = 90.6 %.
    assert "| copy 1 GiB (read + write) | 3,035 | 3,350 | 90.6% |" in h100
    # host probe (e2e_hf_run2.json): 21.944 ms over 1280 kernels = 17.1 µs per kernel.
    assert "| e2e_hf_run2 | prefill | 1 | 128 | 2048 | 21.9 | 1280 | 17.1 |" in h100
    assert "| NCCL | 2.28.9 |" in h100
    assert "| driver | 580.159.04 |" in h100


def test_misaligned_m_costs_nothing_misaligned_n_does(doc):
    h100 = doc.split("(`h100-sxm5-80gb`)", 1)[1]
    # 4095×4096×4096: 0.17921 / 0.17960 ms; 4096×4095×4096: 1.3124 / 0.17960 ms = ×7.31.
    assert "| 4095×4096×4096 | 4096×4096×4096 | bf16 | 179 | ×1.00 |" in h100
    assert "| 4096×4095×4096 | 4096×4096×4096 | bf16 | 1,312 | ×7.31 |" in h100


def test_collectives_rows_and_busbw(coll_doc):
    # allreduce 4 GiB on 2 GPUs: 12.417 ms -> algbw 4294967296 / 12.417e-3 = 345.9 GB/s, factor 1.
    part = coll_doc.split("### allreduce, 2 GPUs", 1)[1]
    assert "| 4 GiB | 12,417 | 346 | 346 |" in part
    # on 4 GPUs: 17.7755 ms -> algbw 241.6, busbw ×2·3/4 = 362.4.
    part = coll_doc.split("### allreduce, 4 GPUs", 1)[1]
    assert "| 4 GiB | 17,775 | 242 | 362 |" in part
    summary = coll_doc.split("## Summary", 1)[1].split("\n## ", 1)[0]
    for coll in ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv"):
        for n in (2, 4):
            assert f"| h200-sxm-141gb | {coll} | {n} | " in summary
    assert "| all | all | aligned | " in summary
    assert "| h200-sxm-141gb | allgather | 3 (chunks off 16 B) | " in summary


def test_docs_are_readable_size(doc, coll_doc):
    assert doc.count("\n") < 1300  # a line per whole-model run (about 470 on each GPU)
    assert coll_doc.count("\n") < 500


# --- synthetic folder --------------------------------------------------------------------------


def _row(op, gpu, factor=1.25):
    ms = op_time(op, gpu).time * 1e3 * factor
    return {"op": op_to_dict(op), "name": op.name, "shape": op.shape, "measured_ms": ms,
            "method": "gpuperf-timer/2 cuda events, l2 flush"}  # fmt: skip


@pytest.fixture
def synthetic(tmp_path):
    gpu = load_gpu(GPU)
    d = tmp_path / GPU
    d.mkdir()
    env = {"gpu": "Test GPU", "driver_version": "1.2.3", "nccl": "9.9.9", "torch": "0.0",
           "clock_sm_mhz": 100, "clock_sm_max_mhz": 200, "clock_mem_mhz": 300,
           "clock_mem_max_mhz": 400}  # fmt: skip
    (d / "env.json").write_text(json.dumps(env))
    gemms = [Gemm("gemm/sq", 2048, 2048, 2048), Gemm("gemm/odd", 2047, 2047, 2047)]
    gemms += [Gemm(f"gemm/n{n}", 2048, n, 4096) for n in range(768, 1280, 128)]
    rows = [_row(op, gpu) for op in gemms]
    rows.append({**_row(Gemm("gemm/bad", 512, 512, 512), gpu), "measured_ms": 0})  # skipped
    (d / "gemm.json").write_text(json.dumps({"env": env, "rows": rows}))
    mem = [Elementwise("elementwise/add", "add", 2**20, n_in=2), Copy("copy/x", 2**21)]
    (d / "memory.json").write_text(json.dumps({"rows": [_row(op, gpu) for op in mem]}))
    cross = {"gemm": [{"mnk": [1, 2, 3], "ours_ms": 0.010, "do_bench_ms": 0.020},
                      {"mnk": [4, 5, 6], "ours_ms": 1.0, "do_bench_ms": 1.01}],
             "copy_1GiB_gbps": 1675.0}  # fmt: skip
    (d / "crosscheck.json").write_text(json.dumps(cross))
    coll = [Collective(f"allreduce/{b}", "allreduce", b, 2) for b in (1024, 2**20, 2**24)]
    data = {"env": {**env, "world_size": 2}, "kind": "allreduce",
            "rows": [_row(op, gpu) for op in coll]}  # fmt: skip
    (d / "coll_allreduce_2gpu.json").write_text(json.dumps(data))
    return tmp_path


def test_synthetic_round_trip(synthetic):
    tabs = {k.split("/", 1)[1]: v for k, v in md.tables(synthetic).items()}
    assert "| GPU | Test GPU |" in tabs["environment"]
    assert "| clocks | SM 100 MHz when stamped (max 200), memory 300 MHz (max 400) |" in tabs[
        "environment"]  # fmt: skip
    square = tabs["gemm-square"]
    assert "| bf16 | 2048 |" in square and "| bf16 | 512 |" not in square  # measured 0: skipped
    # every op was "measured" at 1.25 × its prediction: error = 1/1.25 − 1 = −20 %.
    for name in ("gemm-square", "gemm-misaligned", "gemm-sweep"):
        errs = column(tabs[name], "error")
        assert errs and all(e.rstrip("*") == "-20%" for e in errs), (name, errs)
    assert column(tabs["gemm-misaligned"], "shape M×N×K") == ["2047×2047×2047"]
    assert column(tabs["gemm-sweep"], "N") == ["768", "896", "1024", "1152"]
    assert "| copy 1 GiB (read + write) | 1,675 | 3,350 | 50.0% |" in tabs["copy-bandwidth"]
    assert "| 1×2×3 | 10.0 | 20.0 | -50% |" in tabs["timer-crosscheck"]
    assert "agree within 1.0% (ours lower)" in tabs["timer-crosscheck"]
    assert "e2e" not in tabs  # no e2e file, no table
    coll = md.collectives_doc(synthetic)
    part = coll.split("### allreduce, 2 GPUs", 1)[1]
    assert part.count("-20%") == 3
    assert "| 1 MiB |" in part and "| 16 MiB |" in part


def test_main_prints_writes_and_checks(synthetic, tmp_path, monkeypatch, capsys):
    targets = {"measurements": tmp_path / "m.md", "collectives": tmp_path / "c.md"}
    hand = (f"# My notes\n\nWritten by hand.\n\n<!-- gpuperf:table {GPU}/copy-bandwidth -->\nold\n"
            "<!-- /gpuperf:table -->\n\nThe end.\n")  # fmt: skip
    targets["measurements"].write_text(hand)
    monkeypatch.setattr(md, "DOCS", targets)
    monkeypatch.setattr(md, "ROOT", tmp_path)
    assert md.main(["--results", str(synthetic)]) == 0
    out = capsys.readouterr()
    assert "# My notes" in out.out and "# Collectives: measured NCCL vs gpuperf" in out.out
    assert f"no marker for table {GPU}/gemm-square" in out.err  # data without a place: said
    assert targets["measurements"].read_text() == hand  # printing writes nothing
    assert md.main(["--results", str(synthetic), "--check"]) == 1
    assert md.main(["--results", str(synthetic), "--write"]) == 0
    text = targets["measurements"].read_text()
    assert text.startswith("# My notes\n\nWritten by hand.\n\n") and text.endswith("The end.\n")
    assert "| copy 1 GiB (read + write) | 1,675 |" in text and "\nold\n" not in text
    assert "### allreduce, 2 GPUs" in targets["collectives"].read_text()
    assert md.main(["--results", str(synthetic), "--check"]) == 0


# --- helpers --------------------------------------------------------------------------------------


def test_formatting_helpers():
    assert [md.num(x) for x in (12345.6, 345.6, 34.56, 3.456, 0.03456, None)] == [
        "12,346", "346", "34.6", "3.46", "0.0346", "–"]  # fmt: skip
    assert [md.pct(x) for x in (0.0123, -0.25, 0.00001)] == ["+1.2%", "-25%", "0.0%"]
    assert [md.size(x) for x in (512, 1024, 3 * 2**20, 2**32)] == [
        "512 B", "1 KiB", "3 MiB", "4 GiB"]  # fmt: skip


def test_sweep_one_line_per_n_four_columns_per_sweep():
    gpu = load_gpu(GPU)
    ops = [Gemm(f"g/{m}/{n}", m, n, 4096) for m in (2048, 4096) for n in range(768, 1408, 128)]
    ops = [op for op in ops if (op.m, op.n) != (4096, 1024)]  # a hole in one sweep
    ops.append(Gemm("g/short", 1024, 768, 4096))  # a 1-point "sweep" is not one
    rows = [md.Row(op, op_time(op, gpu).time * 2, op_time(op, gpu), {}) for op in ops]
    head, body, used = md.gemm_sweep(rows)
    assert head[:2] == ["N", "2048×N×4096 measured (µs)"] and head[5] == "4096×N×4096 measured (µs)"
    assert len(head) == 9 and [line[0] for line in body] == ["768", "896", "1024", "1152", "1280"]
    assert len(used) == 9  # the 1024-row GEMM is left to other tables
    assert body[2][5:] == ["–"] * 4
    assert all(line[4].rstrip("*") == "-50%" for line in body)  # measured twice the prediction
    assert [line[3] for line in body] == [
        str(op_time(Gemm("x", 2048, n, 4096), gpu).detail["waves"]) for n in range(768, 1408, 128)
    ]
