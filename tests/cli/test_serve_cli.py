"""`gpuperf serve`: the table, JSON and CSV of a simulated run, the --slo search and its HTML
report, and every bad input -> exit 2 with one error line and no traceback."""

from __future__ import annotations

import csv
import io
import json

import pytest
from clirun import run

SERVE = ("serve", "llama3-8b", "--gpu", "h100")
SLO = ("serve", "llama3.2-1b", "--slo", "ttft=2s,tpot=100ms", "--gpus", "2", "--gpu", "h100",
       "--requests", "60")  # fmt: skip


def ok(capsys, *args: str) -> str:
    """Run; assert exit 0; stdout."""
    code, out, err = run(capsys, *args)
    assert code == 0, (args, code, err[-2000:])
    return out


def refused(capsys, *args: str, match: str = "") -> str:
    """Run; assert exit 2 with one "gpuperf: error:" line (containing `match`), no traceback and
    nothing on stdout."""
    code, out, err = run(capsys, *args)
    assert code == 2, (args, code, err[-2000:])
    assert out == "" and "Traceback" not in err, err
    assert err.count("\n") == 1 and err.startswith("gpuperf: error: "), err
    assert match in err, err
    return err


def test_table_shows_latencies_and_throughput(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    out = " ".join(ok(capsys, *SERVE, "--requests", "8").split())
    for text in ("TTFT", "TPOT", "E2E", "tok/s", "p50", "p99", "llama3-8b", "vllm"):
        assert text in out, text
    assert "8 requests at once" in out


def test_json_is_one_object_with_the_summary(capsys):
    out = ok(capsys, *SERVE, "--requests", "8", "--format", "json")
    assert out.count("\n") == 1
    obj = json.loads(out)
    s = obj["summary"]
    for key in ("ttft_p50_ms", "tpot_p50_ms", "output_tokens_per_s", "kv_cache_tokens"):
        assert key in s, key
    assert s["requests"] == 8 and s["ttft_p50_ms"] > 0 and s["tpot_p50_ms"] > 0
    assert s["output_tokens_per_s"] > 0 and s["kv_cache_tokens"] > 0
    assert obj["engine"]["name"] == "vllm" and obj["tp"] == 1
    assert "requests" not in obj  # only with --per-request


def test_json_per_request(capsys):
    out = ok(capsys, *SERVE, "--requests", "8", "--format", "json", "--per-request", "--osl",
             "16")  # fmt: skip
    reqs = json.loads(out)["requests"]
    assert len(reqs) == 8 and [r["id"] for r in reqs] == list(range(8))
    for r in reqs:
        assert (r["input_tokens"], r["output_tokens"]) == (512, 16)
        assert 0 < r["ttft_ms"] < r["e2e_ms"] and r["tpot_ms"] > 0


def test_csv_is_a_header_and_a_row_per_request(capsys):
    out = ok(capsys, *SERVE, "--requests", "8", "--format", "csv", "--osl", "16")
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["id", "arrival_s", "input_tokens", "output_tokens", "ttft_ms", "tpot_ms",
                       "e2e_ms"]  # fmt: skip
    assert len(rows) == 9
    assert [r[0] for r in rows[1:]] == [str(i) for i in range(8)]
    assert all(float(r[4]) > 0 and float(r[6]) > float(r[4]) for r in rows[1:])


def test_options_reach_the_simulation(capsys):
    """--engine, --isl distributions, --rate and --seed are used (not just parsed)."""
    args = (*SERVE, "--engine", "trtllm", "--isl", "uniform:100:200", "--osl", "8", "--rate",
            "20", "--requests", "10", "--format", "json", "--per-request")  # fmt: skip
    obj = json.loads(ok(capsys, *args))
    assert obj["engine"]["name"] == "trtllm" and obj["engine"]["reserve_full"] is True
    reqs = obj["requests"]
    assert all(100 <= r["input_tokens"] <= 200 for r in reqs)
    arrivals = [r["arrival_s"] for r in reqs]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0
    again = json.loads(ok(capsys, *args))["requests"]
    assert again == reqs
    other = json.loads(ok(capsys, *args, "--seed", "1"))["requests"]
    assert [r["arrival_s"] for r in other] != arrivals


def test_trace_is_replayed(capsys, tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"arrival_s": 0.2, "input_tokens": 64, "output_tokens": 4}\n\n'
                 '{"arrival_s": 0.0, "input_tokens": 32, "output_tokens": 2}\n')  # fmt: skip
    out = ok(capsys, *SERVE, "--trace", str(f), "--format", "csv")
    rows = list(csv.reader(io.StringIO(out)))[1:]
    assert [(float(r[1]), int(r[2]), int(r[3])) for r in rows] == [(0.0, 32, 2), (0.2, 64, 4)]


@pytest.mark.parametrize(
    "args, match",
    [
        (("--engine", "nope"), "unknown engine 'nope'"),
        (("--engine", "vlm"), "did you mean vllm"),
        (("--isl", "abc"), "--isl 'abc'"),
        (("--osl", "uniform:9:3"), "--osl"),
        (("--rate", "-1"), "--rate"),
        (("--rate", "5", "--concurrency", "4"), "--rate and --concurrency"),
        (("--trace", "missing.jsonl"), "missing.jsonl does not exist"),
        (("--gpus", "2"), "--slo"),
        (("--slo", "garbage"), "--slo 'garbage'"),
        (("--slo", "ttft=1s", "--rate", "3"), "--slo"),
        (("--mem-fraction", "0"), "mem_fraction"),
        (("--rate", "1e-300"), "--rate"),
        (("--slo", "ttft=1.2.3ms"), "not a number"),
        (("--slo", "ttft=1s", "--engine", "nosuch"), "unknown engine"),
        (("--slo", "ttft=1s", "--token-budget", "99999999"), "token_budget"),
        (("--no-chunked-prefill", "--isl", "4096", "--token-budget", "2048"), "whole request"),
    ],
)
def test_bad_input_is_one_line(capsys, tmp_path, monkeypatch, args, match):
    monkeypatch.chdir(tmp_path)
    refused(capsys, *SERVE, *args, match=match)
    assert not (tmp_path / "report.html").exists()


def test_bad_engine_file_is_one_line(capsys, tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('base = "vllm"\nmem_fraction = 2\n')
    refused(capsys, *SERVE, "--requests", "2", "--engine", str(f), match="mem_fraction")


def test_a_model_that_does_not_fit_is_one_line(capsys):
    refused(capsys, "serve", "llama2-70b", "--gpu", "h100", "--requests", "2",
            match="does not fit")  # fmt: skip


@pytest.mark.parametrize("case", ["tiny-lognormal", "sources-not-a-table"])
def test_inputs_that_escape_as_tracebacks(capsys, tmp_path, case):
    """`--isl lognormal:1e-300:5` (OverflowError in Lengths.draw) and an engine file with
    `base = "vllm"` and `sources = 3` (TypeError in serve_engines._read) should exit 2 with one
    line; they raise past gpuperf.cli.main (see tests/unit/test_serve_inputs.py)."""
    f = tmp_path / "mine.toml"
    f.write_text('base = "vllm"\nsources = 3\n')
    extra = ("--isl", "lognormal:1e-300:5") if case == "tiny-lognormal" else ("--engine", str(f))
    refused(capsys, *SERVE, "--requests", "2", *extra)


def _dominates(p: dict, q: dict) -> bool:
    a, b = p["tokens_per_s_per_gpu"], p["tokens_per_s_per_user"]
    c, d = q["tokens_per_s_per_gpu"], q["tokens_per_s_per_user"]
    return a >= c and b >= d and (a > c or b > d)


def test_slo_search_over_two_gpus(capsys):
    plan = json.loads(ok(capsys, *SLO, "--format", "json"))
    assert plan["gpus"] == 2 and plan["slo"] == {"ttft_p90_ms": 2000.0, "tpot_p90_ms": 100.0}
    best = plan["best"]
    assert best is not None and best["tp"] in (1, 2) and best["tp"] * best["replicas"] == 2
    assert best["rate"] > 0
    assert best["summary"]["ttft_p90_ms"] <= 2000 and best["summary"]["tpot_p90_ms"] <= 100
    assert sorted(s["tp"] for s in plan["splits"]) == [1, 2]
    assert best["rate"] == max(s["rate"] for s in plan["splits"])
    front = plan["frontier"]
    assert front
    assert not any(_dominates(p, q) for p in front for q in front)


def test_slo_table(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    out = " ".join(ok(capsys, *SLO).split())
    assert "best: tp" in out and "Pareto frontier" in out and "tp1 x 2" in out


def test_run_html_report(capsys, tmp_path, monkeypatch):
    """-o without --slo: the run's batch and KV cache over time and its latency distributions."""
    monkeypatch.chdir(tmp_path)
    ok(
        capsys,
        "serve",
        "llama3.2-1b",
        "--gpu",
        "h100",
        "--rate",
        "20",
        "--requests",
        "60",
        "-o",
        "run.html",
    )
    html = (tmp_path / "run.html").read_text()
    assert "<html" in html and "KV cache over time" in html and "TTFT (ms)" in html


def test_slo_html_report(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ok(capsys, *SLO, "-o", "report.html")
    html = (tmp_path / "report.html").read_text()
    assert "<html" in html and "Pareto" in html


def test_measure_serve_prints_measured_beside_predicted(capsys, monkeypatch):
    """gpuperf measure serve's report, from a committed H200 run (the run itself needs a GPU):
    per request and in aggregate, the simulation of the same requests, cache and budget."""
    import json
    from pathlib import Path

    from gpuperf.cli.measure_serve import _render
    from gpuperf.measure.serve_hf import replay

    monkeypatch.setenv("COLUMNS", "160")
    path = Path(__file__).parents[2] / "benchmarks/results/h200-sxm-141gb/measure_serve_cli.json"
    m = json.loads(path.read_text())
    rep = replay(m, "llama3.2-1b", "h200")
    _render(m, rep, "csv", [], per_request=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("id,input_tokens,output_tokens,ttft_ms,ttft_ms_predicted")
    assert len(lines) == 1 + len(m["requests"])
    _render(m, rep, "json", [])
    agg = {r["metric"]: r for r in json.loads(capsys.readouterr().out)["aggregate"]}
    # The profile's host is the pool's median machine; this run's was faster (+11% / +15% now).
    assert abs(agg["ttft_p50_ms"]["error_pct"]) < 20 and abs(agg["tpot_p50_ms"]["error_pct"]) < 20
    _render(m, rep, "table", [], per_request=True)
    out = capsys.readouterr().out
    assert "per request (ms)" in out and "wall_s" in out


def test_measure_serve_runs_a_closed_loop_when_given_concurrency(capsys, monkeypatch):
    """--concurrency reaches the GPU run (the run itself needs a GPU: a committed H200 closed
    loop stands in for it) and the simulation beside it is the same closed loop."""
    import json
    from pathlib import Path

    from gpuperf.measure import serve_hf

    path = Path(__file__).parents[2] / "benchmarks/results/h200-sxm-141gb/serve_hf_closed.json"
    measured = json.loads(path.read_text())["runs"][0]
    asked = {}

    def fake_run(spec):  # noqa: ANN001, ANN202
        asked.update(spec)
        return measured

    monkeypatch.setattr(serve_hf, "run", fake_run)
    out = json.loads(ok(capsys, "measure", "serve", "llama3.2-1b", "--concurrency", "16",
                        "--requests", "96", "--gpu", "h200", "--format", "json"))  # fmt: skip
    assert asked["concurrency"] == 16 and len(asked["requests"]) == 96
    agg = {r["metric"]: r for r in out["aggregate"]}
    assert agg["wall_s"]["measured"] == pytest.approx(34.8, abs=0.1)
    assert 0 < agg["wall_s"]["predicted"] < 2 * agg["wall_s"]["measured"]


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"engine": 123}, "engine must be"),
        ({"trace": 123}, "--trace must be"),
        ({"kv_tokens": "abc"}, "kv_tokens"),
        ({"workload": 5}, "workload must be"),
        ({"progress": 5}, "progress must be"),
    ],
)
def test_api_serve_refuses_wrong_types(kw, match):
    from gpuperf import api
    from gpuperf.errors import InputError

    with pytest.raises(InputError, match=match):
        api.serve("llama3.2-1b", gpu="h100", **kw)


def test_api_serve_plan_refuses_bad_options_instead_of_noting_them():
    from gpuperf import api
    from gpuperf.errors import InputError

    for kw in ({"requests": "5"}, {"rate": 5}, {"engine": "nosuch"}):
        with pytest.raises(InputError):
            api.serve_plan("llama3.2-1b", "ttft=1s", gpu="h100", **kw)
