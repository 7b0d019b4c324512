"""What a serving simulation is given: request lengths (serve_load.parse_lengths and
Lengths.draw), arrivals (make_workload, read_trace) and engine profiles (serve_engines), with
every bad input refused as a one-line InputError."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import pytest

from gpuperf.errors import InputError
from gpuperf.step.serve_engines import EngineProfile, engine_names, load_engine
from gpuperf.step.serve_load import (
    MAX_LENGTH,
    Lengths,
    Workload,
    make_workload,
    parse_lengths,
    read_trace,
)

FIXED = Lengths("fixed", 64)


def refused(call, *args, match: str = "", **kwargs) -> str:
    """Call; assert it raises an InputError of one line (containing `match`); its message."""
    with pytest.raises(InputError) as exc:
        call(*args, **kwargs)
    msg = str(exc.value)
    assert "\n" not in msg and match in msg, msg
    return msg


# ---------------------------------------------------------------------------------------------
# parse_lengths


@pytest.mark.parametrize(
    "text, kind, a, b",
    [
        ("512", "fixed", 512, 0),
        (512, "fixed", 512, 0),
        (" 128 ", "fixed", 128, 0),
        ("1", "fixed", 1, 0),
        (str(MAX_LENGTH), "fixed", MAX_LENGTH, 0),
        ("uniform:256:1024", "uniform", 256, 1024),
        ("uniform:7:7", "uniform", 7, 7),
        ("Uniform:1:2", "uniform", 1, 2),
        ("normal:512:64", "normal", 512, 64),
        ("normal:512:0", "normal", 512, 0),
        ("lognormal:512:256", "lognormal", 512, 256),
    ],
)
def test_parse_lengths_accepts(text, kind, a, b):
    got = parse_lengths(text, "--isl")
    assert (got.kind, got.a, got.b) == (kind, a, b)


def test_parse_lengths_mean_and_label():
    assert parse_lengths("512", "--isl").mean == 512
    assert parse_lengths("uniform:100:300", "--isl").mean == 200
    assert parse_lengths("lognormal:512:256", "--isl").mean == 512
    assert parse_lengths(512, "--isl").label() == "512"
    assert parse_lengths("normal:512:64", "--isl").label() == "normal:512:64"


@pytest.mark.parametrize(
    "text",
    [
        "abc",  # not a number
        "",
        "0",  # zero
        "-5",  # negative
        "uniform:0:5",
        "uniform:-1:5",
        "normal:0:10",
        "normal:-512:10",
        "lognormal:-512:10",
        "normal:512:-1",  # negative standard deviation
        "lognormal:512:-1",
        "uniform:10:5",  # LO > HI
        "12.5",  # fixed counts are whole
        "uniform:1.5:10",
        "uniform:1:10.5",
        "beta:1:2",  # unknown distribution
        "poisson:5:5",
        "nan",
        "inf",
        "-inf",
        "normal:nan:5",
        "normal:512:inf",
        "lognormal:inf:1",
        "uniform:1:inf",
        "uniform:1",  # wrong arity
        "uniform:1:2:3",
        "normal:512",
        "lognormal:1:2:3",
        "512:",
        ":512",
        "uniform:a:b",
        str(MAX_LENGTH + 1),  # longer than any prompt may be
        f"uniform:1:{MAX_LENGTH + 1}",
    ],
)
def test_parse_lengths_refuses(text):
    refused(parse_lengths, text, "--isl", match=f"--isl {text!r}")


@pytest.mark.parametrize("value", [None, True, 512.0, [512], 0, -3])
def test_parse_lengths_refuses_non_text(value):
    refused(parse_lengths, value, "--osl", match="--osl")


# ---------------------------------------------------------------------------------------------
# Lengths.draw


def test_uniform_draws_stay_within_bounds_and_reach_both_ends():
    rng = random.Random(1)
    lengths = parse_lengths("uniform:3:7", "--isl")
    draws = [lengths.draw(rng) for _ in range(5000)]
    assert all(isinstance(d, int) for d in draws)
    assert set(draws) == {3, 4, 5, 6, 7}


@pytest.mark.parametrize("text", ["normal:2:10", "normal:512:600", "lognormal:2:50",
                                  "lognormal:512:2048"])  # fmt: skip
def test_normal_and_lognormal_draws_are_at_least_one(text):
    rng = random.Random(2)
    lengths = parse_lengths(text, "--isl")
    draws = [lengths.draw(rng) for _ in range(20000)]
    assert all(isinstance(d, int) and 1 <= d <= MAX_LENGTH for d in draws)


def test_normal_draws_clip_at_one():
    """A wide normal has many draws below 1: they become 1, not 0 or negative."""
    rng = random.Random(3)
    lengths = parse_lengths("normal:2:10", "--isl")
    draws = [lengths.draw(rng) for _ in range(2000)]
    assert min(draws) == 1 and draws.count(1) > 500


def test_zero_spread_draws_the_mean():
    rng = random.Random(4)
    for text in ("normal:300:0", "lognormal:300:0"):
        lengths = parse_lengths(text, "--isl")
        assert {lengths.draw(rng) for _ in range(100)} == {300}


@pytest.mark.parametrize("mean, std", [(512, 256), (2000, 500), (128, 256)])
def test_lognormal_mean_and_spread_are_those_asked_for(mean, std):
    """MEAN and STD are of the lengths themselves, not of their log."""
    rng = random.Random(5)
    lengths = parse_lengths(f"lognormal:{mean}:{std}", "--isl")
    draws = [lengths.draw(rng) for _ in range(20000)]
    assert statistics.fmean(draws) == pytest.approx(mean, rel=0.05)
    assert statistics.pstdev(draws) == pytest.approx(std, rel=0.15)


def test_normal_mean_is_that_asked_for():
    rng = random.Random(6)
    lengths = parse_lengths("normal:512:64", "--isl")
    draws = [lengths.draw(rng) for _ in range(20000)]
    assert statistics.fmean(draws) == pytest.approx(512, rel=0.01)
    assert statistics.pstdev(draws) == pytest.approx(64, rel=0.05)


def test_fixed_draws_do_not_consume_randomness():
    rng = random.Random(7)
    assert [FIXED.draw(rng) for _ in range(3)] == [64, 64, 64]
    assert rng.random() == random.Random(7).random()


def test_a_tiny_lognormal_mean_is_refused_or_drawn():
    """A mean below one token is refused (it once reached draw and overflowed)."""
    try:
        lengths = parse_lengths("lognormal:1e-300:5", "--isl")
    except InputError:
        return
    assert lengths.draw(random.Random(0)) >= 1


# ---------------------------------------------------------------------------------------------
# make_workload


def test_requests_alone_all_arrive_at_once():
    w = make_workload(parse_lengths("uniform:10:20", "--isl"), FIXED, requests=50, seed=1)
    assert isinstance(w, Workload) and len(w.requests) == 50
    assert all(r.arrival == 0.0 for r in w.requests)
    assert not w.closed and w.concurrency == 0
    assert all(10 <= r.prompt <= 20 and r.output == 64 for r in w.requests)
    assert len({r.prompt for r in w.requests}) > 1  # drawn per request
    assert "50 requests" in w.label


def test_no_arrival_option_is_one_request():
    w = make_workload(FIXED, FIXED)
    assert len(w.requests) == 1 and w.requests[0].arrival == 0.0


def test_rate_gives_increasing_arrivals_with_the_mean_gap():
    rate, n = 10.0, 5000
    w = make_workload(FIXED, FIXED, requests=n, rate=rate, seed=3)
    arrivals = [r.arrival for r in w.requests]
    assert len(arrivals) == n and arrivals[0] > 0
    assert all(b > a for a, b in zip(arrivals, arrivals[1:], strict=False))
    gaps = [b - a for a, b in zip([0.0, *arrivals[:-1]], arrivals, strict=True)]
    assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=0.05)
    assert statistics.pstdev(gaps) == pytest.approx(1 / rate, rel=0.1)  # exponential gaps
    assert not w.closed


def test_rate_defaults_to_a_thousand_requests():
    assert len(make_workload(FIXED, FIXED, rate=100.0).requests) == 1000


def test_same_seed_same_workload_other_seed_other_workload():
    isl, osl = parse_lengths("uniform:1:4096", "--isl"), parse_lengths("lognormal:128:64", "--o")
    a = make_workload(isl, osl, requests=100, rate=5.0, seed=42)
    b = make_workload(isl, osl, requests=100, rate=5.0, seed=42)
    c = make_workload(isl, osl, requests=100, rate=5.0, seed=43)
    assert a == b
    assert a.requests != c.requests
    assert [r.prompt for r in a.requests] != [r.prompt for r in c.requests]
    assert [r.arrival for r in a.requests] != [r.arrival for r in c.requests]


def test_concurrency_is_a_closed_loop_of_eight_requests_per_user():
    w = make_workload(FIXED, FIXED, concurrency=5)
    assert w.closed and w.concurrency == 5
    assert len(w.requests) == 40
    assert [r.arrival for r in w.requests[:6]] == [0.0, 1.0, 2.0, 3.0, 4.0, 0.0]  # the user
    assert "5 concurrent users" in w.label


def test_concurrency_with_requests_keeps_the_count():
    w = make_workload(FIXED, FIXED, concurrency=4, requests=10)
    assert w.concurrency == 4 and len(w.requests) == 10


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    f = tmp_path / "trace.jsonl"
    f.write_text('{"arrival_s": 0.5, "input_tokens": 100, "output_tokens": 10}\n')
    return f


@pytest.mark.parametrize(
    "options, first, second",
    [
        ({"rate": 1.0, "concurrency": 2}, "--rate", "--concurrency"),
        ({"trace": "TRACE", "rate": 1.0}, "--trace", "--rate"),
        ({"trace": "TRACE", "concurrency": 2}, "--trace", "--concurrency"),
    ],
)
def test_two_arrival_options_are_refused(trace, options, first, second):
    options = {k: (str(trace) if v == "TRACE" else v) for k, v in options.items()}
    msg = refused(make_workload, FIXED, FIXED, **options)
    assert first in msg and second in msg


def test_trace_with_requests_is_refused(trace):
    refused(make_workload, FIXED, FIXED, trace=trace, requests=5, match="--requests")


def test_trace_alone_is_read(trace):
    w = make_workload(FIXED, FIXED, trace=trace)
    assert [(r.arrival, r.prompt, r.output) for r in w.requests] == [(0.5, 100, 10)]


@pytest.mark.parametrize(
    "options, match",
    [
        ({"rate": 0.0}, "--rate"),
        ({"rate": -1.0}, "--rate"),
        ({"rate": math.nan}, "--rate"),
        ({"rate": math.inf}, "--rate"),
        ({"rate": True}, "--rate"),
        ({"rate": "10"}, "--rate"),
        ({"requests": 0}, "--requests"),
        ({"requests": -4}, "--requests"),
        ({"requests": 2.5}, "--requests"),
        ({"requests": True}, "--requests"),
        ({"concurrency": 0}, "--concurrency"),
        ({"concurrency": 1.5}, "--concurrency"),
        ({"concurrency": 2, "requests": 0}, "--requests"),
    ],
)
def test_bad_counts_and_rates_are_refused(options, match):
    refused(make_workload, FIXED, FIXED, match=match, **options)


# ---------------------------------------------------------------------------------------------
# read_trace


def _line(arrival: object = 0.0, isl: object = 10, osl: object = 5) -> str:
    return json.dumps({"arrival_s": arrival, "input_tokens": isl, "output_tokens": osl})


def test_read_trace_sorts_by_arrival_and_skips_blank_lines(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join([_line(2.0, 20, 2), "", "   ", _line(0.5, 5, 1), _line(1, 10, 3), ""]))
    w = read_trace(f)
    assert [(r.arrival, r.prompt, r.output) for r in w.requests] == [
        (0.5, 5, 1), (1.0, 10, 3), (2.0, 20, 2)
    ]  # fmt: skip
    assert isinstance(w.requests[1].arrival, float)
    assert not w.closed and "3 requests" in w.label


def test_read_trace_ignores_extra_keys(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"arrival_s": 0, "input_tokens": 3, "output_tokens": 4, "id": "x"}))
    assert read_trace(f).requests[0].prompt == 3


@pytest.mark.parametrize(
    "bad, what",
    [
        ('{"arrival_s": 1.0, "input_tokens": 10}', "output_tokens"),  # a key missing
        ('{"input_tokens": 10, "output_tokens": 5}', "arrival_s"),
        (_line(arrival=-1.0), "arrival_s"),  # negative
        (_line(isl=-10), "input_tokens"),
        (_line(osl=0), "output_tokens"),
        (_line(arrival=True), "arrival_s"),  # bool
        (_line(isl=True), "input_tokens"),
        (_line(osl=False), "output_tokens"),
        (_line(isl=10.5), "input_tokens"),  # not whole
        (_line(isl="10"), "input_tokens"),  # text
        (_line(osl=MAX_LENGTH + 1), "output_tokens"),
        ('{"arrival_s": NaN, "input_tokens": 10, "output_tokens": 5}', "arrival_s"),
        ("[1, 2, 3]", "object"),  # not an object
        ('"text"', "object"),
        ("42", "object"),
        ('{"arrival_s": 1.0, ', "JSON"),  # invalid JSON
        ("not json", "JSON"),
    ],
)
def test_read_trace_refuses_a_bad_line_naming_it(tmp_path, bad, what):
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join([_line(0.0), "", bad, _line(1.0)]) + "\n")
    msg = refused(read_trace, f, match=what)
    assert "line 3" in msg and str(f) in msg


@pytest.mark.parametrize("body", ["", "\n\n  \n"])
def test_read_trace_refuses_an_empty_file(tmp_path, body):
    f = tmp_path / "t.jsonl"
    f.write_text(body)
    refused(read_trace, f, match="no requests")


def test_read_trace_refuses_a_missing_file(tmp_path):
    refused(read_trace, tmp_path / "nope.jsonl", match="does not exist")


# ---------------------------------------------------------------------------------------------
# load_engine: built-ins


def test_engine_names_are_the_four_built_ins():
    assert engine_names() == ["hf", "sglang", "trtllm", "vllm"]


def test_hf_profile():
    hf = load_engine("hf")
    assert isinstance(hf, EngineProfile) and hf.name == "hf"
    assert (hf.impl, hf.attention, hf.block_size) == ("eager", "gather_sdpa", 256)
    assert hf.cuda_graphs is False and hf.chunked_prefill is True


def test_vllm_profile():
    v = load_engine("vllm")
    assert v.name == "vllm" and v.block_size == 16 and v.chunked_prefill is True
    assert v.impl == "fused" and v.attention == "varlen" and v.cuda_graphs is True
    assert v.token_budget == 8192 and v.mem_fraction == 0.9 and v.reserve_full is False
    assert v.graph_sizes == tuple(sorted(v.graph_sizes)) and v.graph_sizes[-1] == 512
    assert v.sources["block_size"]  # each number says where it comes from


def test_trtllm_profile():
    t = load_engine("trtllm")
    assert t.name == "trtllm" and t.reserve_full is True
    assert t.impl == "fused" and t.block_size == 32 and t.cuda_graphs is True


def test_engine_names_ignore_case():
    assert load_engine("VLLM") == load_engine("vllm")


def test_unknown_engine_suggests_a_near_miss():
    msg = refused(load_engine, "vlm", match="did you mean vllm")
    assert "'vlm'" in msg


def test_unknown_engine_lists_the_built_ins():
    msg = refused(load_engine, "nope", match="unknown engine")
    assert "did you mean" not in msg
    assert "hf" in msg and "trtllm" in msg and "vllm" in msg


def test_missing_profile_file_is_refused(tmp_path):
    refused(load_engine, tmp_path / "gone.toml", match="does not exist")


# ---------------------------------------------------------------------------------------------
# load_engine: user profiles


def _profile(folder: Path, body: str, name: str = "mine.toml") -> Path:
    f = folder / name
    f.write_text(body)
    return f


def test_user_profile_inherits_its_base_and_overrides(tmp_path):
    f = _profile(tmp_path, 'base = "vllm"\ntoken_budget = 4096\nreserve_full = true\n'
                 'description = "tuned"\n[sources]\ntoken_budget = "my runs"\n')  # fmt: skip
    p, v = load_engine(f), load_engine("vllm")
    assert p.token_budget == 4096 and p.reserve_full is True and p.description == "tuned"
    assert (p.block_size, p.graph_sizes, p.step_overhead) == (
        v.block_size, v.graph_sizes, v.step_overhead
    )  # fmt: skip
    assert p.sources["token_budget"] == "my runs"  # the user's source replaces the base's
    assert p.sources["block_size"] == v.sources["block_size"]  # the base's others are kept


def test_user_profile_can_name_itself(tmp_path):
    f = _profile(tmp_path, 'base = "vllm"\nname = "tuned"\n')
    assert load_engine(str(f)).name == "tuned"


def test_user_profile_without_base_takes_the_defaults_and_its_file_name(tmp_path):
    p = load_engine(_profile(tmp_path, "token_budget = 1024\n", "small.toml"))
    assert p.name == "small" and p.token_budget == 1024
    assert p.block_size == EngineProfile("x").block_size


def test_user_profile_with_base_is_named_after_its_file(tmp_path):
    """A profile's name is its own (its file's), never its base's (as the hardware loader)."""
    assert load_engine(_profile(tmp_path, 'base = "vllm"\n')).name == "mine"


def test_user_profile_may_base_on_another_file(tmp_path):
    parent = _profile(tmp_path, 'base = "trtllm"\nblock_size = 64\n', "parent.toml")
    child = _profile(tmp_path, f'base = "{parent}"\ntoken_budget = 512\n', "child.toml")
    p = load_engine(child)
    assert (p.block_size, p.token_budget, p.reserve_full) == (64, 512, True)


def test_relative_base_is_found_beside_the_profile(tmp_path, monkeypatch):
    """A relative `base` file is found beside the profile that names it, wherever gpuperf runs
    (as hardware/loader._read_with_base)."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    _profile(folder, 'base = "vllm"\nblock_size = 64\n', "parent.toml")
    child = _profile(folder, 'base = "parent.toml"\n', "child.toml")
    monkeypatch.chdir(tmp_path)
    assert load_engine(child).block_size == 64


@pytest.mark.parametrize(
    "body, match",
    [
        ("bogus = 1", "unknown key 'bogus'"),
        ("token_bugdet = 1", "did you mean token_budget"),
        ('token_budget = "big"', "token_budget must"),
        ("token_budget = 1.5", "token_budget must"),
        ("token_budget = 0", "token_budget must"),
        ("max_seqs = -1", "max_seqs must"),
        ("block_size = true", "block_size must"),
        ('chunked_prefill = "yes"', "chunked_prefill must"),
        ("cuda_graphs = 1", "cuda_graphs must"),
        ("mem_fraction = 0", "mem_fraction must"),
        ("mem_fraction = 0.0", "mem_fraction must"),
        ("mem_fraction = 1.01", "mem_fraction must"),
        ("mem_fraction = 2", "mem_fraction must"),
        ('mem_fraction = "0.9"', "mem_fraction must"),
        ("step_overhead = -0.001", "step_overhead must"),
        ("per_seq = -1e-6", "per_seq must"),
        ("per_kv_token = -1", "per_kv_token must"),
        ("eager_step = -0.5", "eager_step must"),
        ("step_overhead = nan", "step_overhead must"),
        ("step_overhead = inf", "step_overhead must"),
        ("graph_sizes = [0, 8]", "graph_sizes must"),
        ("graph_sizes = [-4]", "graph_sizes must"),
        ("graph_sizes = [1.5, 8]", "graph_sizes must"),
        ("graph_sizes = [true]", "graph_sizes must"),
        ('graph_sizes = ["8"]', "graph_sizes must"),
        ("graph_sizes = 8", "graph_sizes must"),
        ('impl = "jit"', "impl must"),
        ('attention = "flash"', "attention must"),
        ("name = 3", "name must"),
        ('base = "nope"', "unknown engine 'nope'"),
        ("base = 3", "base must"),
        ("token_budget = ", "not valid TOML"),
    ],
)
def test_bad_user_profiles_are_refused(tmp_path, body, match):
    text = body + "\n" if body.startswith("base") else f'base = "vllm"\n{body}\n'
    refused(load_engine, _profile(tmp_path, text), match=match)


def test_mem_fraction_of_one_is_allowed(tmp_path):
    assert load_engine(_profile(tmp_path, 'base = "vllm"\nmem_fraction = 1\n')).mem_fraction == 1


def test_graph_sizes_are_sorted_and_deduplicated(tmp_path):
    p = load_engine(_profile(tmp_path, 'base = "vllm"\ngraph_sizes = [8, 2, 8, 4]\n'))
    assert p.graph_sizes == (2, 4, 8)


def test_a_profile_naming_itself_as_its_base_is_refused(tmp_path):
    f = tmp_path / "self.toml"
    f.write_text(f'base = "{f}"\n')
    refused(load_engine, f, match="names itself")


def test_a_relative_self_base_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _profile(tmp_path, 'base = "self.toml"\n', "self.toml")
    refused(load_engine, "self.toml", match="names itself")


def test_a_base_cycle_of_two_files_is_refused(tmp_path):
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(f'base = "{b}"\n')
    b.write_text(f'base = "{a}"\n')
    refused(load_engine, a, match="names itself")


def test_non_table_sources_with_a_base_is_an_input_error(tmp_path):
    """`sources = 3` beside a base is an InputError, not a TypeError from the merge."""
    refused(load_engine, _profile(tmp_path, 'base = "vllm"\nsources = 3\n'), match="sources")


def test_non_table_sources_without_a_base_is_refused(tmp_path):
    refused(load_engine, _profile(tmp_path, "sources = 3\n"), match="sources")


# ---------------------------------------------------------------------------------------------
# load_engine: overrides


def test_overrides_apply_and_keep_the_rest():
    v = load_engine("vllm")
    p = load_engine("vllm", token_budget=2048, cuda_graphs=False, max_seqs=None)
    assert p.token_budget == 2048 and p.cuda_graphs is False
    assert p.max_seqs == v.max_seqs and p.block_size == v.block_size and p.name == "vllm"
    assert load_engine("vllm").token_budget == 8192  # the built-in is not changed


def test_overrides_apply_to_a_profile_object():
    p = load_engine(load_engine("hf"), block_size=32)
    assert p.block_size == 32 and p.impl == "eager"


def test_no_overrides_returns_the_profile():
    p = load_engine("trtllm")
    assert load_engine(p) is p and load_engine(p, token_budget=None) is p


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"token_budget": 0}, "token_budget"),
        ({"token_budget": 2.5}, "token_budget"),
        ({"mem_fraction": 0}, "mem_fraction"),
        ({"mem_fraction": 1.5}, "mem_fraction"),
        ({"step_overhead": -1.0}, "step_overhead"),
        ({"chunked_prefill": "no"}, "chunked_prefill"),
        ({"graph_sizes": [0]}, "graph_sizes"),
        ({"token_bugdet": 4}, "did you mean token_budget"),
    ],
)
def test_bad_overrides_are_refused(overrides, match):
    msg = refused(load_engine, "vllm", match=match, **overrides)
    assert "engine vllm" in msg


# ---------------------------------------------------------------------------------------------
# EngineProfile.graph_batch


def test_graph_batch_is_the_next_captured_size():
    v = load_engine("vllm")
    assert [v.graph_batch(n) for n in (1, 2, 3, 5, 8, 9, 17, 257, 512)] == [
        1, 2, 4, 8, 8, 16, 24, 272, 512
    ]  # fmt: skip
    assert v.graph_batch(513) is None and v.graph_batch(10_000) is None


def test_graph_batch_of_trtllm_and_a_custom_list():
    assert load_engine("trtllm").graph_batch(1500) == 2048
    p = EngineProfile("x", graph_sizes=(4, 16), max_seqs=64, token_budget=64)
    assert (p.graph_batch(1), p.graph_batch(5), p.graph_batch(17)) == (4, 16, None)


def test_graph_batch_pads_no_further_than_the_largest_decode_step():
    """TensorRT-LLM drops captured sizes past min(max_batch_size, max_num_tokens) and pads to
    that cap instead (_filter_cuda_graph_batch_sizes): 1,186 decodes under max_batch_size 1,536
    replay the 1,536 graph, not the 2,048 one."""
    t = load_engine("trtllm", max_seqs=1536)
    assert (t.graph_batch(1186), t.graph_batch(1024), t.graph_batch(1536)) == (1536, 1024, 1536)
    assert t.graph_batch(1537) is None
    small = load_engine("trtllm", token_budget=300)  # one token a decode: 300 at most
    assert small.graph_batch(260) == 300 and small.graph_batch(301) is None
    # vLLM captures its sizes as listed (up to twice max_num_seqs): 97 decodes pad to 104
    assert load_engine("vllm", max_seqs=100).graph_batch(97) == 104


def test_graph_batch_is_none_without_cuda_graphs():
    assert load_engine("hf").graph_batch(1) is None
    assert load_engine("vllm", cuda_graphs=False).graph_batch(8) is None
    assert EngineProfile("x", graph_sizes=()).graph_batch(1) is None
