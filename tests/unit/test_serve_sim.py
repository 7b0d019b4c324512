"""The continuous-batching simulation, checked by hand on a step timer whose times are simple
(1 ms per step + 10 us per token), and the step timer against the step engine."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gpuperf import api
from gpuperf.errors import InputError
from gpuperf.step.serve import retract_share, simulate
from gpuperf.step.serve_engines import load_engine
from gpuperf.step.serve_load import Request, Workload
from gpuperf.workloads.scenario import Scenario

VLLM = load_engine("vllm")


class LinearTimer:
    """1 ms per step plus 10 us per token; records every step's make-up."""

    def __init__(self, engine):  # noqa: ANN001
        self.engine = engine
        self.steps: list[tuple] = []

    def step_s(self, chunks, n_dec, sum_ctx, rows):  # noqa: ANN001
        self.steps.append((chunks, n_dec, sum_ctx, rows))
        tokens = n_dec + sum(c for c, _ in chunks)
        return 1e-3 + 1e-5 * tokens


def run(reqs, engine=VLLM, kv_tokens=1 << 20, concurrency=0):  # noqa: ANN001
    timer = LinearTimer(engine)
    work = Workload(tuple(Request(*r) for r in reqs), concurrency)
    return simulate(work, timer, engine, kv_tokens), timer


def test_one_request_chunks_its_prompt_then_decodes_a_token_a_step():
    eng = replace(VLLM, token_budget=64)
    res, timer = run([(0.0, 100, 5)], eng)
    # two prefill chunks (64 + 36 tokens), then 4 decode steps for tokens 2..5
    assert [s[0] for s in timer.steps] == [((64, 0),), ((36, 64),), (), (), (), ()]
    assert [s[1] for s in timer.steps] == [0, 0, 1, 1, 1, 1]
    # contexts: the decode of token 2 attends over 100 prompt + 1 fed-back tokens
    assert [s[2] for s in timer.steps[2:]] == [101, 102, 103, 104]
    step1, step2, dec = 1e-3 + 64e-5, 1e-3 + 36e-5, 1e-3 + 1e-5
    assert res.first[0] == pytest.approx(step1 + step2)
    assert res.finish[0] == pytest.approx(step1 + step2 + 4 * dec)
    assert res.tpot == [pytest.approx(dec)]
    assert res.steps == 6


def test_one_token_answers_end_at_their_prefill():
    res, timer = run([(0.0, 10, 1), (0.0, 10, 1)])
    assert res.steps == 1 and res.first == res.finish
    assert timer.steps[0][3] == 2  # both sample their token


def test_decodes_and_chunks_share_a_step_within_the_budget():
    eng = replace(VLLM, token_budget=32)
    res, timer = run([(0.0, 8, 20), (0.0, 50, 3)], eng)
    # step 1: request 0 whole (8) + 24 of request 1; step 2: request 0 decodes, 26 more of 1
    assert timer.steps[0][0] == ((8, 0), (24, 0))
    assert timer.steps[1] == (((26, 24),), 1, 9, 2)
    assert all(n + sum(c for c, _ in ch) <= 32 for ch, n, _, _ in timer.steps)
    assert res.output == [20, 3] and not any(math.isnan(f) for f in res.finish)


def test_arrivals_wait_for_their_time():
    res, timer = run([(0.0, 10, 2), (5.0, 10, 2)])
    assert res.arrival == [0.0, 5.0]
    assert res.first[1] > 5.0 and res.first[1] - 5.0 == pytest.approx(1e-3 + 1e-4)


def test_a_full_cache_preempts_the_newest_and_everything_still_finishes():
    eng = replace(VLLM, block_size=16)
    reqs = [(0.0, 64, 64)] * 6
    res, _ = run(reqs, eng, kv_tokens=16 * 24)  # 24 blocks; each request grows to 8
    assert res.preemptions > 0
    assert all(f >= a for f, a in zip(res.finish, res.first, strict=True))
    assert res.peak_kv <= 1.0 + 1e-12


def test_reserving_whole_requests_never_preempts():
    eng = replace(load_engine("trtllm"), block_size=16)
    res, timer = run([(0.0, 64, 64)] * 6, eng, kv_tokens=16 * 24)
    assert res.preemptions == 0
    # at most 3 requests of 8 blocks each fit 24 blocks: never more than 3 in a step
    assert max(n + len(ch) for ch, n, _, _ in timer.steps) <= 3


def test_a_closed_loop_keeps_its_users_busy_and_no_more():
    reqs = [(float(i % 2), 20, 4) for i in range(6)]
    res, timer = run(reqs, concurrency=2)
    assert max(n + len(ch) for ch, n, _, _ in timer.steps) <= 2
    # each request after the first two arrives when an earlier one ends
    for i in range(2, 6):
        assert res.arrival[i] in res.finish[:i]


def test_a_closed_loops_next_request_misses_the_step_already_formed():
    """The user sends its next request when the step that ended the last one returns; the
    engine has formed the next step by then, so the request joins the one after (measured: an
    HF closed loop's TTFT is two steps, serve_hf_closed.json). An idle engine takes it at once."""
    reqs = [(0.0, 8, 3), (0.0, 8, 6), (0.0, 8, 3)]  # user 0 ends after 3 steps, user 1 goes on
    res, timer = run(reqs, concurrency=2)
    assert res.arrival[2] == res.finish[0]
    make_up = [(chunks, n_dec) for chunks, n_dec, _, _ in timer.steps]
    assert make_up[:5] == [(((8, 0), (8, 0)), 0), ((), 2), ((), 2), ((), 1), (((8, 0),), 1)]
    step4, step5 = (1e-3 + 1e-5 * 1), (1e-3 + 1e-5 * 9)
    assert res.first[2] - res.arrival[2] == pytest.approx(step4 + step5)
    alone, _ = run([(0.0, 8, 3), (0.0, 8, 3)], concurrency=1)
    assert alone.first[1] - alone.arrival[1] == pytest.approx(1e-3 + 1e-5 * 8)


def test_requests_longer_than_the_cache_are_refused():
    with pytest.raises(InputError, match="does not fit the KV cache"):
        run([(0.0, 100, 100)], kv_tokens=128)


def test_without_chunked_prefill_a_prompt_over_the_budget_is_refused():
    eng = replace(VLLM, chunked_prefill=False, token_budget=64)
    with pytest.raises(InputError, match="token budget"):
        run([(0.0, 100, 5)], eng)
    res, timer = run([(0.0, 40, 3), (0.0, 40, 3)], eng)
    assert timer.steps[0][0] == ((40, 0),)  # whole prompts only: the second waits
    assert res.first[1] > res.first[0]


def test_the_step_timer_is_the_step_engine():
    """One request alone: its prefill step is `gpuperf predict`'s prefill plus the engine's host
    work per step; a decode step of a captured batch is predict's CUDA-graph decode plus it."""
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.step.serve_steps import StepTimer
    from gpuperf.workloads.config import load_model
    from gpuperf.workloads.scenario import Scenario

    cfg, gpu = load_model("llama3-8b"), load_gpu("h100")
    engine = replace(VLLM, step_overhead=40.0, per_seq=0.5)  # host terms the fits may zero
    timer = StepTimer(cfg, gpu, None, engine, Scenario(mode="prefill"))
    host = gpu.params.host_dispatch_s * (engine.step_overhead + engine.per_seq)
    prefill = api.predict(cfg, gpu=gpu, mode="prefill", seq=512).total_ms * 1e-3
    assert timer.step_s(((512, 0),), 0, 0, 1) == pytest.approx(prefill + host, rel=1e-9)
    decode = api.predict(cfg, gpu=gpu, mode="decode", batch=64, ctx=639,
                         cuda_graphs=True).total_ms * 1e-3  # fmt: skip
    step = timer.step_s((), 64, 64 * 640, 64)
    assert step == pytest.approx(decode + host + 63 * gpu.params.host_dispatch_s * engine.per_seq,
                                 rel=1e-6)  # fmt: skip


def test_hf_sliding_window_layers_pay_their_cache_path_below_the_window():
    """Hugging Face's paged cache scatters a sliding layer's new keys and values into the
    gathered cache (masked_scatter_) at any length: a Mistral step below its 4096-token window
    costs the same step without the window plus two masked_scatter_ (three kernels each) over the
    gathered K and V of each of its 32 layers, and three host calls per layer in an eager step."""
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.step.run import coster_for
    from gpuperf.step.serve_steps import _WINDOW_CALLS, StepTimer, window_scatter
    from gpuperf.workloads.config import load_model
    from gpuperf.workloads.scenario import Scenario

    hf, gpu = load_engine("hf"), load_gpu("h100")
    cfg = load_model("mistral-7b")
    flat = replace(cfg, sliding_window=0, sliding_layers=())
    base = Scenario(mode="prefill")
    window, plain = (StepTimer(c, gpu, None, hf, base) for c in (cfg, flat))
    n, ctx = 64, 600  # 64 decodes over 600 cached tokens each: eager (no graphs in hf)
    extra = window.step_s((), n, n * ctx, n) - plain.step_s((), n, n * ctx, n)
    keys = n * ctx + n  # the cache and the step's own tokens, gathered
    attn = next(op for seg in window._layout(n, 0)[0] for op, _, what in seg.variable
                if what == "attn_window")  # fmt: skip
    sc = replace(base, seq=n, batch=1, micro_batch=None)
    coster = coster_for(sc, window.where, 1.0)
    one = sum(coster.row(k)[7] * 1e-3 for k in window_scatter(attn, keys, cfg.kv_heads))
    gpu_extra = cfg.layers * 2 * one
    host_extra = cfg.layers * _WINDOW_CALLS * gpu.params.host_dispatch_s
    assert gpu_extra > 0 and extra >= gpu_extra * 0.99  # the scatter, at least
    assert extra <= (gpu_extra + host_extra) * 1.01  # and no more than it and its calls


def test_longer_contexts_and_bigger_batches_take_longer():
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.step.serve_steps import StepTimer
    from gpuperf.workloads.config import load_model
    from gpuperf.workloads.scenario import Scenario

    timer = StepTimer(load_model("llama3-8b"), load_gpu("h100"), None, VLLM,
                      Scenario(mode="prefill"))  # fmt: skip
    assert timer.step_s((), 64, 64 * 4096, 64) > timer.step_s((), 64, 64 * 512, 64)
    assert timer.step_s((), 128, 128 * 512, 128) > timer.step_s((), 16, 16 * 512, 16)
    # between two grid points the step is between their times
    lo, mid, hi = (timer.step_s(((t, 0),), 0, 0, 1) for t in (1024, 1056, 1088))
    assert lo < mid < hi


def test_serve_is_deterministic_and_counts_every_token():
    a = api.serve("llama3.2-1b", gpu="h100", isl="uniform:64:512", osl="uniform:8:64",
                  rate=50.0, requests=200, seed=3)  # fmt: skip
    b = api.serve("llama3.2-1b", gpu="h100", isl="uniform:64:512", osl="uniform:8:64",
                  rate=50.0, requests=200, seed=3)  # fmt: skip
    assert a.summary == b.summary
    r = a.result
    assert a.summary["output_tokens_per_s"] == pytest.approx(sum(r.output) / r.span_s)
    assert all(t > 0 for t in r.ttft) and all(e >= t for e, t in zip(r.e2e, r.ttft, strict=True))


def test_the_admission_margin_keeps_blocks_free_for_running_requests():
    """With a margin, a request is not admitted into a running step while fewer than that share
    of the blocks are free (Hugging Face's FIFO checks before each candidate): in a 16-block
    cache with margin 0.5, request 0 (3 blocks) and 1 (1 block for its first chunk) enter at
    once, request 2 next step while 10 blocks are free, request 3 never while they run (8 or
    fewer free); without the margin all four run together."""
    eng = replace(VLLM, block_size=16, token_budget=64)
    reqs = [(0.0, 48, 16)] * 4
    _, free_for_all = run(reqs, eng, kv_tokens=16 * 16)
    _, kept = run(reqs, replace(eng, admit_margin=0.5), kv_tokens=16 * 16)
    busiest = [max(n + len(ch) for ch, n, _, _ in t.steps) for t in (free_for_all, kept)]
    assert busiest == [4, 3]


def test_reserving_without_chunked_prefill_still_runs_the_decodes():
    """A whole prompt that the cache could hold but the reservations could not used to skip the
    decodes and stall (review): the decodes run until the reservation frees."""
    eng = replace(load_engine("trtllm"), chunked_prefill=False, block_size=1)
    res, _ = run([(0.0, 2, 8), (0.001, 2, 2)], eng, kv_tokens=10)
    assert not any(math.isnan(f) for f in res.finish)
    assert res.first[1] >= res.finish[0]  # admitted once the first request's reservation ended


def test_without_chunked_prefill_the_budget_must_hold_a_whole_request():
    """A preempted request prefills its prompt and answer so far again, whole: a budget below
    that could never run it (review), so it is refused up front, as vLLM V0 refuses."""
    eng = replace(VLLM, chunked_prefill=False, block_size=4, token_budget=8)
    with pytest.raises(InputError, match="whole request"):
        run([(0.0, 2, 15), (0.0, 3, 11)], eng, kv_tokens=20)


def test_an_engine_that_reserves_needs_only_whole_prompts_in_the_budget():
    """An engine that reserves every admitted request's whole length never preempts
    (TensorRT-LLM's GUARANTEED_NO_EVICT), so without chunked prefill its budget must hold a
    prompt, not a prompt and its answer (trtllm-bench sets max_num_tokens from the prompts)."""
    eng = replace(load_engine("trtllm"), chunked_prefill=False, block_size=4, token_budget=8)
    res, _ = run([(0.0, 8, 30), (0.0, 8, 30)], eng, kv_tokens=80)
    assert res.preemptions == 0 and not any(math.isnan(f) for f in res.finish)
    with pytest.raises(InputError, match="whole prompt: 9 tokens"):
        run([(0.0, 9, 30)], eng, kv_tokens=80)


def test_a_budget_that_cannot_hold_a_prompt_beside_the_decodes_is_warned_of():
    """A whole prompt as large as the budget runs only in a step without decodes, so it waits
    for every running request to end (review: 145 tokens/s where the budget allowed more); the
    report says so, and which budget holds both."""
    kw = dict(gpu="h100", engine="trtllm", chunked_prefill=False, isl=512, osl=64,
              requests=20)  # fmt: skip
    short = api.serve("llama3-8b", token_budget=512, **kw)
    assert any("--token-budget 531" in w for w in short.warnings)
    assert not any("whole prompt" in w for w in api.serve("llama3-8b", token_budget=531,
                                                          **kw).warnings)  # fmt: skip


def test_a_padded_graph_charges_attention_only_for_the_real_decodes():
    """A decode step replayed on a larger captured graph runs every kernel over the padded rows
    but attention, whose padding slots hold no cache: 261 decodes of 2,000 cached tokens on
    the 384 graph cost more than 256 on the 256 graph and less than 384 real ones."""
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.step.serve_run import Server

    srv = Server(api.resolve_model("llama3-8b"), load_gpu("h100"), None, "trtllm", dtype="fp8")
    step = srv.timer.step_s
    t256, t261, t384 = (step((), n, n * 2000, n) for n in (256, 261, 384))
    assert t256 < t261 < t384
    # the padded rows' other kernels cost less than the 123 missing decodes' attention would
    # (charging attention over the graph's 384 slots made t261 equal t384)
    assert t261 - t256 < t384 - t261


def test_a_step_that_preempts_admits_nothing_new():
    """vLLM V1 admits no waiting request in a step that preempted; before (review) the victim
    came straight back and was preempted again: 200 requests in a 1500-block cache preempted
    1,337 times, 750 with V1's rule."""
    import random

    rng = random.Random(1)
    reqs = [(0.0, rng.randint(64, 1024), rng.randint(64, 1024)) for _ in range(200)]
    res, _ = run(reqs, replace(VLLM, block_size=16, token_budget=512), kv_tokens=16 * 1500)
    assert res.preemptions == 750
    assert not any(math.isnan(f) for f in res.finish)


def test_batch_waiting_holds_prefills_back_while_decodes_run():
    """TRT-LLM's batch waiting: a prompt that arrives while decodes run waits until the step's
    tokens (whole prompts + decodes) reach the share of the budget, or for so many steps."""
    eng = replace(VLLM, token_budget=100, batch_wait_iters=3, batch_wait_tokens=0.5)
    # request 0 decodes from step 2 on; request 1 (20 tokens) arrives during it
    res, timer = run([(0.0, 10, 10), (0.0005, 20, 2)], eng)
    make_up = [(chunks, n_dec) for chunks, n_dec, _, _ in timer.steps]
    # step 1: request 0's prompt alone (no decodes: nothing waits); steps 2-4: request 0's
    # decodes, request 1 held back (20 + 1 tokens < 50); step 5: the wait has lasted 3 steps
    assert make_up[:5] == [(((10, 0),), 0), ((), 1), ((), 1), ((), 1), (((20, 0),), 1)]
    plain, _ = run([(0.0, 10, 10), (0.0005, 20, 2)], replace(eng, batch_wait_iters=0))
    assert res.first[1] - plain.first[1] == pytest.approx(3 * (1e-3 + 1e-5), rel=1e-6)


def test_batch_waiting_ends_when_enough_tokens_wait():
    eng = replace(VLLM, token_budget=100, batch_wait_iters=50, batch_wait_tokens=0.5)
    reqs = [(0.0, 10, 30), (0.0005, 20, 2), (0.0025, 30, 2)]
    res, timer = run(reqs, eng)
    # requests 1 and 2 wait together until 20 + 30 + 1 >= 50 tokens, then prefill in one step
    first_prefill = next(s for s in timer.steps[1:] if s[0])
    assert first_prefill[0] == ((20, 0), (30, 0))
    assert res.first[1] == res.first[2]


def test_batch_waiting_needs_both_limits():
    """TRT-LLM stops waiting at once when either limit is 0."""
    reqs = [(0.0, 10, 10), (0.0005, 20, 2)]
    base, _ = run(reqs)
    for iters, tokens in ((0, 0.5), (3, 0.0)):
        res, _ = run(reqs, replace(VLLM, batch_wait_iters=iters, batch_wait_tokens=tokens))
        assert res.first == base.first


def test_engine_profiles_check_batch_waiting():
    with pytest.raises(InputError, match="batch_wait_tokens is a share"):
        load_engine("trtllm", batch_wait_tokens=1.5)
    with pytest.raises(InputError, match="batch_wait_iters must be a whole number"):
        load_engine("trtllm", batch_wait_iters=-1)
    assert load_engine("trtllm", batch_wait_iters=20).batch_wait_iters == 20


def test_an_engine_that_keeps_prefills_apart_runs_them_first_and_alone():
    """SGLang: a prompt that can be admitted runs in a step of prefills alone, before the
    decodes; its chunks go on alone until it is done; the decodes run in the steps between."""
    eng = replace(VLLM, token_budget=16, mixed_prefill=False)
    res, timer = run([(0.0, 8, 4), (0.0015, 40, 2)], eng)
    make_up = [(chunks, n_dec) for chunks, n_dec, _, _ in timer.steps]
    # step 1: request 0's prompt; step 2: its decode (request 1 not yet there); then request
    # 1's 40 tokens in chunks of 16, 16, 8 with request 0's decodes waiting; then decodes
    assert make_up[:6] == [(((8, 0),), 0), ((), 1), (((16, 0),), 0), (((16, 16),), 0),
                           (((8, 32),), 0), ((), 2)]  # fmt: skip
    assert all(not (ch and n) for ch, n, _, _ in timer.steps)
    mixed, _ = run([(0.0, 8, 4), (0.0015, 40, 2)], replace(eng, mixed_prefill=True))
    assert res.finish[0] > mixed.finish[0]  # request 0's decodes wait out the prefill


def test_the_sglang_profile_keeps_prefills_apart():
    eng = load_engine("sglang")
    assert not eng.mixed_prefill and eng.chunked_prefill and eng.graph_batch(160) == 160
    assert eng.graph_batch(161) is None


def test_prefills_kept_apart_never_share_a_step_even_when_a_smaller_chunk_would_fit():
    """Review: with 4-token blocks the next prompt's first chunk did not fit a prefill-only
    step, so the step ran the decodes, and then a smaller chunk joined them."""
    eng = replace(VLLM, token_budget=33, block_size=4, mixed_prefill=False)
    res, timer = run([(0, 1, 5), (0, 1, 5), (0.0015, 33, 2)], eng, kv_tokens=40)
    assert all(not (chunks and n) for chunks, n, _, _ in timer.steps)
    assert not any(math.isnan(f) for f in res.finish)


def test_prefills_kept_apart_admit_a_prompt_only_when_all_of_it_fits():
    """SGLang's PrefillAdder: a prompt whose later chunks would not fit is not started (it
    would preempt itself every other step)."""
    eng = replace(load_engine("sglang"), token_budget=16, cuda_graphs=False)
    apart, _ = run([(0, 30, 30), (0.0025, 40, 2)], eng, kv_tokens=64)
    mixed, _ = run([(0, 30, 30), (0.0025, 40, 2)], replace(eng, mixed_prefill=True),
                   kv_tokens=64)  # fmt: skip
    assert apart.preemptions <= mixed.preemptions
    assert apart.steps <= mixed.steps + 5


@pytest.mark.parametrize("first_answer", [3, 4, 5, 6])
def test_batch_waiting_counts_only_what_the_scheduler_would_admit(first_answer):
    """A prompt that cannot be admitted yet (the reserving cache is full) is not held back and
    uses up no waiting steps: once it fits it waits the full batch_wait_iters."""
    eng = replace(VLLM, reserve_full=True, block_size=1, token_budget=100, batch_wait_iters=4,
                  batch_wait_tokens=1.0)  # fmt: skip
    res, timer = run([(0, 10, 40), (0, 10, first_answer), (0.0005, 20, 2)], eng, kv_tokens=75)
    # request 2 fits once request 1 ends; from then on 4 decode-only steps pass before it runs
    end1 = res.finish[1]
    t, steps_before = 0.0, 0
    for chunks, n, _, _ in timer.steps:
        t += 1e-3 + 1e-5 * (n + sum(c for c, _ in chunks))
        if t > end1 + 1e-12:
            if chunks:
                break
            steps_before += 1
    assert steps_before == 4


def test_a_reserving_engine_takes_a_request_that_exactly_fills_the_cache():
    """Review: the cache holds a request's prompt and every answer token but the last; the
    reservation counted one token more and refused a request that fits exactly."""
    res, _ = run([(0.0, 100, 29)], replace(VLLM, reserve_full=True, block_size=16),
                 kv_tokens=128)  # fmt: skip
    assert res.output == [29] and not math.isnan(res.finish[0])


def test_batch_waiting_with_prefills_kept_apart_is_refused():
    with pytest.raises(InputError, match="mixed_prefill = false they never do"):
        load_engine("trtllm", mixed_prefill=False, batch_wait_iters=20, batch_wait_tokens=0.9)


def test_without_chunked_prefill_whole_prompts_join_the_decodes_unless_kept_apart():
    """TensorRT-LLM without chunked context: a prompt enters whole, beside the running decodes;
    kept apart as well (vLLM V0) it runs in a step of prefills alone."""
    reqs = [(0.0, 8, 6), (0.0015, 20, 2)]
    eng = replace(VLLM, token_budget=64, chunked_prefill=False)
    _, mixed = run(reqs, eng)
    _, v0 = run(reqs, replace(eng, mixed_prefill=False))
    assert any(chunks == ((20, 0),) and n == 1 for chunks, n, _, _ in mixed.steps)
    assert any(chunks == ((20, 0),) and n == 0 for chunks, n, _, _ in v0.steps)
    assert all(not (chunks and n) for chunks, n, _, _ in v0.steps)
    # batch waiting holds whole prompts back too
    _, held = run(reqs, replace(eng, batch_wait_iters=2, batch_wait_tokens=1.0))
    first = [i for i, (ch, _, _, _) in enumerate(held.steps) if ch == ((20, 0),)][0]
    assert first == [i for i, (ch, _, _, _) in enumerate(mixed.steps) if ch == ((20, 0),)][0] + 2


def test_hf_window_scatter_kernels_match_their_profiles():
    """The three kernels of a sliding layer's masked_scatter_ (window_scatter) against their
    times per call in two H100 profiles of Phi-3-mini served at two loads, the values per call
    read from the gather kernel beside them (4 bytes a value, read and written)."""
    import json
    from pathlib import Path
    from types import SimpleNamespace

    from gpuperf.hardware.loader import load_gpu
    from gpuperf.perfmodel.ops import Copy
    from gpuperf.step.cost import Coster
    from gpuperf.step.serve_steps import window_scatter
    from gpuperf.workloads.scenario import Scenario

    coster = Coster(load_gpu("h100"), None, Scenario(mode="prefill", impl="eager"))
    ms = lambda op: coster.row(op)[7]  # noqa: E731
    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "h100-sxm5-80gb"
    kernels = {"gather": "vectorized_gather_kernel", "mask": "direct_copy_kernel",
               "scan": "DeviceScanKernel", "scatter": "launch_masked_scatter_kernel"}  # fmt: skip
    for name in ("serve_hf_profile_families2.json", "serve_hf_profile_families2_decode.json"):
        run = next(r for r in json.loads((results / name).read_text())["runs"]
                   if r["model"] == "phi-3-mini")  # fmt: skip
        per_call = {}
        for key, needle in kernels.items():
            # the mask copy: the direct copy launched exactly once per masked_scatter_
            calls = [g for g in run["gpu_top"] if needle in g["name"]]
            if key == "mask":
                scatters = next(
                    g["count"] for g in run["gpu_top"] if kernels["scatter"] in g["name"]
                )
                calls = [g for g in calls if g["count"] == scatters]
            per_call[key] = calls[0]["us"] / calls[0]["count"] * 1e-3  # ms
        lo, hi = 1, 1 << 32  # the gathered values whose gather takes the measured time
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if ms(Copy("g", 2 * mid)) < per_call["gather"] else (lo, mid)
        op = SimpleNamespace(kv_heads=32, head_dim=96, kv_dtype=None, dtype="bf16")
        mask, scan, scatter = (ms(k) for k in window_scatter(op, lo // (32 * 96), 32))
        for got, want in ((mask, "mask"), (scan, "scan"), (scatter, "scatter")):
            assert got == pytest.approx(per_call[want], rel=0.1), (name, want)


def test_hf_gathered_attention_repeats_kv_heads_as_the_eager_layer_does():
    """Hugging Face's paged|sdpa step gathers the cache's K and V, then repeat_kv copies each to
    every query head with the same non-vectorized kernel the eager layer runs (transformer_layers'
    attn/repeat_k and attn/repeat_v), then one masked SDPA: its attention time is those parts."""
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.perfmodel.ops import Attention, Copy, Elementwise
    from gpuperf.step.run import coster_for
    from gpuperf.step.serve_steps import StepTimer
    from gpuperf.workloads.config import load_model
    from gpuperf.workloads.scenario import Scenario

    cfg, gpu = load_model("llama3-8b"), load_gpu("h100")
    base = Scenario(mode="prefill")
    timer = StepTimer(cfg, gpu, None, load_engine("hf"), base)
    n, ctx = 16, 600
    attn = next(op for seg in timer._layout(n, 0)[0] for op, _, what in seg.variable
                if what == "attn")  # fmt: skip
    coster = coster_for(replace(base, seq=n, batch=1, micro_batch=None), timer.where, 1.0)
    keys = n * ctx  # the decodes' contexts, each holding its step's own token
    full = keys * cfg.heads * cfg.hd
    parts = (
        Copy("attn/gather", keys * cfg.kv_heads * 2 * cfg.hd * 2, "bf16"),
        Elementwise("attn/repeat_k", "repeat_kv", full, 1, 1, "bf16", None, 0.0),
        Elementwise("attn/repeat_v", "repeat_kv", full, 1, 1, "bf16", None, 0.0),
        Attention(attn.name, 1, cfg.heads, cfg.heads, n, keys, cfg.hd, False, "bf16", mask=True),
    )
    want = sum(coster.row(op)[7] * 1e-3 for op in parts)
    assert timer._gathered(coster, attn, n, ctx, ()) == pytest.approx(want, rel=1e-9)
    # the repeat is the non-vectorized copy's pace, slower than a plain copy of its bytes
    plain = coster.row(Copy("c", full * 2, "bf16"))[7]
    assert coster.row(parts[1])[7] > 1.2 * plain


def test_hf_gathered_attention_without_gqa_copies_the_transposed_kv_once_each():
    """Without GQA no repeat_kv copies K and V, so PyTorch's SDPA makes the transposed views
    contiguous: two non-vectorized copies (as cp_torch's), beside the gather of every KV head."""
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.perfmodel.ops import Attention, Copy, Elementwise
    from gpuperf.step.run import coster_for
    from gpuperf.step.serve_steps import StepTimer
    from gpuperf.workloads.config import load_model

    gqa = load_model("llama3-8b")
    cfg = replace(gqa, num_key_value_heads=gqa.heads)
    base = Scenario(mode="prefill")
    timer = StepTimer(cfg, load_gpu("h100"), None, load_engine("hf"), base)
    n, ctx = 16, 600
    attn = next(op for seg in timer._layout(n, 0)[0] for op, _, what in seg.variable
                if what == "attn")  # fmt: skip
    coster = coster_for(replace(base, seq=n, batch=1, micro_batch=None), timer.where, 1.0)
    keys, hd = n * ctx, cfg.hd
    full = keys * cfg.heads * hd
    parts = (
        Copy("attn/gather", keys * cfg.heads * 2 * hd * 2, "bf16"),
        Elementwise("attn/k_contiguous", "copy", full, 1, 1, "bf16", generic=True),
        Elementwise("attn/v_contiguous", "copy", full, 1, 1, "bf16", generic=True),
        Attention(attn.name, 1, cfg.heads, cfg.heads, n, keys, hd, False, "bf16", mask=True),
    )
    want = sum(coster.row(op)[7] * 1e-3 for op in parts)
    assert timer._gathered(coster, attn, n, ctx, ()) == pytest.approx(want, rel=1e-9)


def test_hf_eager_steps_gather_the_caches_own_kv_heads_and_graph_steps_keep_theirs():
    """An eager step's gathered path sizes the gather and the repeat by the cache's KV heads
    per rank (tensor parallelism may leave one, which repeats as a view: no copy); a CUDA-graph
    decode step keeps the accounting its runs were checked with (its op after the static
    cache's repeat: heads == kv_heads, and no second repeat or contiguous copy)."""
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.perfmodel.ops import Attention, Copy
    from gpuperf.step.run import coster_for
    from gpuperf.step.serve_steps import StepTimer
    from gpuperf.workloads.config import load_model

    cfg = load_model("llama3-8b")  # 32 heads over 8 KV heads
    base = Scenario(mode="prefill", impl="eager")
    hf = replace(load_engine("hf"), cuda_graphs=True)
    n, ctx = 16, 600
    timer = StepTimer(cfg, load_gpu("h100"), None, hf, base)

    def attn_of(t: StepTimer, graph: int):  # noqa: ANN202
        return next(op for seg in t._layout(n, graph)[0] for op, _, what in seg.variable
                    if what == "attn")  # fmt: skip

    eager_op, graph_op = attn_of(timer, 0), attn_of(timer, n)
    assert graph_op.kv_heads == cfg.heads and eager_op.kv_heads == cfg.kv_heads
    coster = coster_for(replace(base, seq=n, batch=1, micro_batch=None), timer.where, 1.0)
    keys, hd = n * ctx, cfg.hd
    graph_parts = (
        Copy("attn/gather", keys * cfg.heads * 2 * hd * 2, "bf16"),
        Attention(graph_op.name, 1, cfg.heads, cfg.heads, n, keys, hd, False, "bf16", mask=True),
    )
    want = sum(coster.row(op)[7] * 1e-3 for op in graph_parts)
    assert timer._gathered(coster, graph_op, n, ctx, (), graph=True) == pytest.approx(
        want, rel=1e-9
    )
    assert timer.cache_heads(eager_op) == timer.cache_heads(graph_op) == cfg.kv_heads
    # TP=8 leaves one KV head a rank: gathered once, repeated as a view (no copy)
    tp8 = StepTimer(cfg, load_gpu("h100"), None, hf, replace(base, tp=8))
    op8 = attn_of(tp8, 0)
    assert tp8.cache_heads(op8) == 1
    c8 = coster_for(replace(base, tp=8, seq=n, batch=1, micro_batch=None), tp8.where, 1.0)
    one = (
        Copy("attn/gather", keys * 1 * 2 * hd * 2, "bf16"),
        Attention(op8.name, 1, op8.heads, op8.heads, n, keys, hd, False, "bf16", mask=True),
    )
    assert tp8._gathered(c8, op8, n, ctx, ()) == pytest.approx(
        sum(c8.row(op)[7] * 1e-3 for op in one), rel=1e-9)  # fmt: skip


# Room kept for answers (SGLang's new_token_ratio): block size 1, a cache of 100 tokens, prompts
# of 10 and answers of 30, so a request asks 40 tokens of room.
KEEP = replace(VLLM, block_size=1, token_budget=64, cuda_graphs=False, new_token_ratio=1.0,
               new_token_ratio_min=1.0)  # fmt: skip
THREE = [(0.0, 10, 30)] * 3


def _most_in_a_step(timer) -> int:  # noqa: ANN001
    return max(n + len(ch) for ch, n, _, _ in timer.steps)


def test_room_kept_for_answers_admits_only_what_the_answers_leave_room_for():
    """Admitted two at once (40 < 100, then 40 < 90 - 30 promised), the third waits: room =
    100 - 2 x (10 + g) cached - 2 x (30 - g) to come = 20 at every step, until both end.
    Without the rule all three run at once and the cache (120 tokens asked) preempts."""
    res, timer = run(THREE, KEEP, kv_tokens=100)
    assert res.preemptions == 0 and _most_in_a_step(timer) == 2
    assert res.first[2] > max(res.finish[:2])
    free_for_all, timer0 = run(THREE, replace(KEEP, new_token_ratio=0.0), kv_tokens=100)
    assert _most_in_a_step(timer0) == 3 and free_for_all.preemptions > 0


def test_room_kept_for_answers_counts_each_answer_up_to_the_clip():
    """With answers counted at most 8 tokens each, 18 tokens of room admit all three; and a
    request arriving while two 40-token answers decode finds 100 - 2 x (10 + g) - 2 x 8 of room
    (its ask: 18) instead of none."""
    _, timer = run(THREE, replace(KEEP, answer_clip=8), kv_tokens=100)
    assert _most_in_a_step(timer) == 3
    late = [(0.0, 10, 40), (0.0, 10, 40), (0.0035, 10, 40)]
    clipped, _ = run(late, replace(KEEP, answer_clip=8), kv_tokens=100)
    assert clipped.first[2] < min(clipped.finish[:2])
    whole, _ = run(late, KEEP, kv_tokens=100)
    assert whole.first[2] > min(whole.finish[:2])


def test_a_prompts_last_chunk_keeps_room_for_its_answer():
    """SGLang's add_chunked_req: the step that runs a prompt's last chunk keeps its answer's
    room before it admits anyone (review: 200 - 64 - (36 + 60) = 40 < the 80 the next asks)."""
    eng = replace(load_engine("sglang"), block_size=1, token_budget=64, cuda_graphs=False,
                  new_token_ratio=1.0, new_token_ratio_min=1.0)  # fmt: skip
    res, timer = run([(0, 100, 60), (0, 20, 60)], eng, kv_tokens=200)
    assert timer.steps[1][0] == ((36, 64),)
    assert res.preemptions == 0


def test_the_kept_share_decays_with_decode_steps():
    """From 1 to 0 over 10 decode steps: the third request joins before the first two end."""
    res, _ = run(THREE, replace(KEEP, new_token_ratio_min=0.0, new_token_ratio_steps=10),
                 kv_tokens=100)  # fmt: skip
    assert res.first[2] < min(res.finish[:2])


def test_an_idle_engine_starts_its_estimate_again():
    """The share decays to 0 over the first batch; after the engine idles, a later batch is
    admitted exactly as on a fresh engine (SGLang resets new_token_ratio when idle)."""
    eng = replace(KEEP, new_token_ratio_min=0.0, new_token_ratio_steps=10)
    later = [(10.0, 10, 30)] * 3
    both, _ = run([(0.0, 10, 30)] * 2 + later, eng, kv_tokens=100)
    alone, _ = run(later, eng, kv_tokens=100)
    for i in range(3):
        assert both.first[2 + i] - 10.0 == pytest.approx(alone.first[i] - 10.0)
        assert both.finish[2 + i] - 10.0 == pytest.approx(alone.finish[i] - 10.0)


def test_a_preemption_sets_the_kept_share_from_the_answers_so_far():
    """SGLang's retract_decode: (answer tokens so far + 20 per running request) / (their
    answers + 1), at most 1; a run that preempts under the rule still finishes everything."""
    assert retract_share(50, 199, 2) == pytest.approx(90 / 200)
    assert retract_share(190, 199, 2) == 1.0
    eng = replace(KEEP, new_token_ratio_min=0.0, new_token_ratio_steps=1)
    res, _ = run([(0.0, 10, 40)] * 3, eng, kv_tokens=100)
    assert res.preemptions == 1 and not any(math.isnan(f) for f in res.finish)


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_the_simulation_takes_the_share_a_preemption_sets(monkeypatch, share):
    """After the preemption the share is what retract_share says: kept whole (1), a later
    request waits longer than with none kept (0)."""
    import gpuperf.step.serve as serve_mod

    eng = replace(KEEP, new_token_ratio=0.2, new_token_ratio_min=0.0, new_token_ratio_steps=1000)
    reqs = [(0.0, 10, 40)] * 3 + [(0.01, 10, 40)] * 3
    monkeypatch.setattr(serve_mod, "retract_share", lambda *a: share)
    res, _ = run(reqs, eng, kv_tokens=100)
    monkeypatch.setattr(serve_mod, "retract_share", lambda *a: 1.0 - share)
    other, _ = run(reqs, eng, kv_tokens=100)
    assert res.preemptions >= 1
    assert (res.first[4] > other.first[4]) == (share == 1.0)


def test_new_token_ratio_is_an_engine_option_and_a_share():
    assert load_engine("sglang").new_token_ratio == 0.7
    assert load_engine("sglang", new_token_ratio=0.0).new_token_ratio == 0.0
    with pytest.raises(InputError, match="new_token_ratio is a share"):
        load_engine("vllm", new_token_ratio=1.5)
