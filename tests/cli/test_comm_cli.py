"""`gpuperf predict allreduce|...|sendrecv` on the built-in system profiles."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from gpuperf.cli import cli
from gpuperf.errors import InputError


def _run(*args: str):
    return CliRunner().invoke(cli, ["predict", *args])


def _json(*args: str) -> dict:
    result = _run(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_allreduce_sweep_json():
    out = _json("allreduce", "--bytes", "1K:1G:x4", "--gpu", "h200", "--nproc", "4")
    rows = out["ops"]
    assert len(rows) == 11 and rows[0]["bytes"] == 1024 and rows[-1]["bytes"] == 1 << 30
    assert out["ranks"] == 4 and out["nodes"] == 1
    assert rows[0]["proto"] == "LL" and rows[-1]["proto"] == "Simple"
    times = [r["time_us"] for r in rows]
    assert times == sorted(times)
    for r in rows:
        # time = max(call floor, latency + bytes / bandwidth + ring copy tail)
        work = r["lat_us"] + r["bw_term_us"] + r["copy_tail_us"]
        assert r["time_us"] == pytest.approx(max(r["floor_us"], work))
        # the tail copies size / ranks per rank, on ring only
        assert (r["copy_tail_us"] > 0) == (r["algo"] == "ring")
        # busbw = algbw × 2(n-1)/n with n = 4
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 1.5)


def test_multi_node_system():
    out = _json("allreduce", "--bytes", "1G", "--system", "dgx-h100", "--nodes", "4")
    assert out["ranks"] == 32 and out["nodes"] == 4
    assert out["ops"][0]["algo"] == "ring"


def test_alltoall_two_nodes_is_slower_than_one():
    one = _json("alltoall", "--bytes", "64M", "--system", "dgx-h200")
    two = _json("alltoall", "--bytes", "64M", "--system", "dgx-h200", "--nodes", "2")
    assert two["ops"][0]["time_us"] > 2 * one["ops"][0]["time_us"]


def test_sendrecv_csv_has_units_in_headers():
    result = _run(
        "sendrecv", "--bytes", "1M", "--system", "dgx-h100", "--nodes", "2", "--format", "csv"
    )
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(io.StringIO(result.output)))
    assert rows[0][:3] == ["size (B)", "algo", "proto"]
    assert "time (µs)" in rows[0] and "busbw (GB/s)" in rows[0]
    assert len(rows) == 2


def test_table_and_help():
    result = _run("broadcast", "--bytes", "1M", "--gpu", "h100", "--nproc", "8")
    assert result.exit_code == 0, result.output
    assert "busbw" in result.output and "(µs)" in result.output
    help_text = _run("allreduce", "--help").output
    assert "gpuperf predict allreduce --bytes 1G --system dgx-h100 --nodes 4" in help_text


def test_forced_algorithm_and_nvls():
    off = _json("allreduce", "--bytes", "1G", "--system", "dgx-h100")
    on = _json("allreduce", "--bytes", "1G", "--system", "dgx-h100", "--nvls")
    assert on["ops"][0]["algo"] == "nvls" and off["ops"][0]["algo"] == "ring"
    tree = _json("allreduce", "--bytes", "1G", "--system", "dgx-h100", "--algo", "tree")
    assert tree["ops"][0]["algo"] == "tree"


def test_bad_input_is_input_error():
    result = _run("allreduce", "--bytes", "1G", "--gpu", "h100", "--nodes", "2")
    assert isinstance(result.exception, InputError)
    result = _run("allreduce", "--bytes", "1G", "--system", "dgx-h100", "--proto", "LL256")
    assert isinstance(result.exception, InputError)
