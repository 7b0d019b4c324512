"""gpuperf serve: a discrete-event simulation of a continuous-batching server.

The scheduler (one replica, FIFO; vLLM V1's, which TRT-LLM's in-flight batching and Hugging
Face's continuous batching resemble): every step, each running request gets its tokens within
the token budget (a decode one, a prompt being prefilled its next chunk), then waiting requests
are admitted in arrival order while the budget, the sequence limit and the paged KV cache allow.
A request's blocks are taken as its tokens enter the cache; when a step's decodes need blocks the
cache lacks, the most recently admitted request is preempted (its blocks freed, its prompt and
what it generated prefilled again later: vLLM's recompute). Without chunked prefill a prompt
enters whole, in one step, beside the decodes (TensorRT-LLM without chunked context). An engine
that keeps prefills apart (mixed_prefill = false) runs a step of prefills alone whenever a
prompt is under way or the next can be admitted (SGLang; with whole prompts, vLLM V0). Each
step's time comes from the step engine for that step's make-up (step.serve_steps).

Metrics (vLLM's benchmark_serving and aiconfigurator define them so): TTFT = first token - arrival;
TPOT = (E2E - TTFT) / (output tokens - 1), the mean inter-token latency of a request, the first
token excluded; E2E = last token - arrival. Throughput over the span from the first arrival to
the last token. Tokens/s per user = 1 / mean TPOT.

Decodes are kept in aggregate (count, sum of contexts, a heap of finishing steps, a count per
block phase), so a step costs the prefills, arrivals and departures it has, not its batch size.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuperf.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpuperf.step.serve_engines import EngineProfile
    from gpuperf.step.serve_load import Workload
    from gpuperf.step.serve_steps import StepTimer

SERIES_POINTS = 200  # time series points kept for the report


class DoesNotFit(InputError):
    """The model or a request does not fit the GPUs' memory (a split to skip, not bad input)."""


MAX_STEPS = 50_000_000
# After a preemption an engine with new_token_ratio counts this many more answer tokens per
# running request (SGLang's SGLANG_RETRACT_DECODE_STEPS, retract_decode)
RETRACT_STEPS = 20


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between ranks (numpy's default)."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass
class ServeResult:
    """What a simulated (or measured) serving run gives: per request and in aggregate."""

    arrival: list[float]
    first: list[float]
    finish: list[float]
    prompt: list[int]
    output: list[int]
    steps: int
    preemptions: int
    kv_tokens: int  # the cache's capacity, tokens
    mean_batch: float
    mean_kv: float  # mean fraction of the cache in use, over time
    peak_kv: float
    series: dict[str, list[float]] = field(default_factory=dict)  # t_s, batch, kv

    @property
    def ttft(self) -> list[float]:
        return [f - a for f, a in zip(self.first, self.arrival, strict=True)]

    @property
    def e2e(self) -> list[float]:
        return [f - a for f, a in zip(self.finish, self.arrival, strict=True)]

    @property
    def tpot(self) -> list[float]:
        return [(e - f) / (n - 1) for e, f, n in zip(self.finish, self.first, self.output,
                                                      strict=True) if n > 1]  # fmt: skip

    @property
    def span_s(self) -> float:
        return max(self.finish) - min(self.arrival)

    def summary(self, gpus: int = 1) -> dict[str, Any]:
        """The aggregate numbers (times in ms)."""
        out: dict[str, Any] = {"requests": len(self.arrival)}
        for name, vals in (("ttft", self.ttft), ("tpot", self.tpot), ("e2e", self.e2e)):
            s = sorted(vals)
            out[f"{name}_mean_ms"] = 1e3 * sum(s) / len(s) if s else math.nan
            for q in (50, 90, 99):
                out[f"{name}_p{q}_ms"] = 1e3 * percentile(s, q)
        span = self.span_s
        out_tok, in_tok = sum(self.output), sum(self.prompt)
        out["wall_s"] = span
        out["output_tokens_per_s"] = out_tok / span if span > 0 else math.nan
        out["total_tokens_per_s"] = (out_tok + in_tok) / span if span > 0 else math.nan
        out["output_tokens_per_s_per_gpu"] = out["output_tokens_per_s"] / gpus
        tpot = out["tpot_mean_ms"]
        out["tokens_per_s_per_user"] = 1e3 / tpot if tpot and tpot > 0 else math.nan
        out["requests_per_s"] = len(self.arrival) / span if span > 0 else math.nan
        out["mean_batch"] = self.mean_batch
        out["mean_kv_occupancy"] = self.mean_kv
        out["peak_kv_occupancy"] = self.peak_kv
        out["steps"] = self.steps
        out["preemptions"] = self.preemptions
        out["kv_cache_tokens"] = self.kv_tokens
        return out


class _Series:
    """Time-weighted means and a thinned time series of (batch, KV occupancy) per step."""

    def __init__(self) -> None:
        self.t: list[float] = []
        self.batch: list[float] = []
        self.kv: list[float] = []
        self.sum_b = self.sum_kv = self.dur = 0.0
        self.peak = 0.0
        self.every = 1
        self.n = 0

    def add(self, t_end: float, dt: float, batch: int, kv: float) -> None:
        self.sum_b += batch * dt
        self.sum_kv += kv * dt
        self.dur += dt
        self.peak = max(self.peak, kv)
        self.n += 1
        if self.n % self.every == 0:
            self.t.append(t_end)
            self.batch.append(batch)
            self.kv.append(kv)
            if len(self.t) >= 2 * SERIES_POINTS:  # keep every other point from now on
                self.t, self.batch, self.kv = self.t[::2], self.batch[::2], self.kv[::2]
                self.every *= 2


def retract_share(so_far: int, answers: int, running: int) -> float:
    """The share of answers to come an engine keeps room for after a preemption: the running
    requests' answer tokens so far plus RETRACT_STEPS each, over their answers' lengths
    (SGLang's retract_decode)."""
    return min(1.0, (so_far + RETRACT_STEPS * running) / (answers + 1))


def simulate(workload: Workload, timer: StepTimer, engine: EngineProfile, kv_tokens: int,
             progress: Callable[[int, int], None] | None = None) -> ServeResult:  # fmt: skip
    """Run `workload` through one replica (module docstring)."""
    reqs = workload.requests
    n = len(reqs)
    bs = engine.block_size
    blocks_total = kv_tokens // bs
    # A request's cache holds its prompt and every answer token but the last (never fed back).
    longest = max(r.prompt + r.output - 1 for r in reqs)
    if longest > blocks_total * bs:
        raise DoesNotFit(
            f"a request of {longest} cached tokens does not fit the KV cache of "
            f"{blocks_total * bs} tokens (per replica); add GPUs (--tp) or shorten the requests"
        )
    if engine.new_token_ratio:  # admitted only while prompt + answer (to the clip) < the room
        ask = max(r.prompt + min(r.output, engine.answer_clip) for r in reqs)
        if ask >= blocks_total * bs:
            raise DoesNotFit(
                f"a request asks room for {ask} tokens (its prompt and answer, as the engine "
                "admits with new_token_ratio), which needs a KV cache of more than the "
                f"{blocks_total * bs} tokens there are (per replica): add GPUs (--tp), shorten "
                "the requests or set --new-token-ratio 0"
            )
    budget = engine.token_budget
    # Without chunked prefill a prompt runs whole in one step; a preempted request prefills its
    # prompt and answer so far again, whole (vLLM V0 asks max_num_batched_tokens >=
    # max_model_len for the same reason). An engine that reserves every admitted request's
    # whole length never preempts (TensorRT-LLM's GUARANTEED_NO_EVICT): its prompts alone.
    whole_len = max(r.prompt for r in reqs) if engine.reserve_full else longest
    if not engine.chunked_prefill and whole_len > budget:
        what = "prompt" if engine.reserve_full else "request"
        raise InputError(
            f"without chunked prefill the token budget must hold a whole {what}: {whole_len} "
            f"tokens and a budget of {budget} (raise --token-budget or allow --chunked-prefill)"
        )
    max_seqs = engine.step_seqs
    # cuDNN's plans of the gathered SDPA's shapes (eager steps only: a graph replays its own)
    planned: set[tuple[int, int]] | None = (
        set() if engine.plan_new_shapes and not engine.cuda_graphs else None
    )
    arrival = [math.nan] * n
    first = [math.nan] * n
    finish = [math.nan] * n
    prompt = [r.prompt for r in reqs]
    output = [r.output for r in reqs]
    gen = [0] * n  # tokens generated so far
    todo = [0] * n  # tokens to prefill (prompt, plus what was generated after a preemption)
    done = [0] * n  # of those, in the cache
    # Arrivals: open workloads in time order; a closed loop releases the next request as one ends.
    if workload.closed:
        pending: deque[int] = deque(range(workload.concurrency, n))
        for i in range(min(workload.concurrency, n)):
            arrival[i] = 0.0
        upcoming = deque(range(min(workload.concurrency, n)))
    else:
        pending = deque()
        for i, r in enumerate(reqs):
            arrival[i] = r.arrival
        upcoming = deque(range(n))
    waiting: deque[int] = deque()
    late: list[int] = []  # closed loop: sent during this step (they miss the next one)
    deferred: list[int] = []  # sent during the last step: they join the coming one's successor
    prefilling: list[int] = []  # admission order
    order: dict[int, None] = {}  # every running request, admission order (preemption victims)
    # Decodes in aggregate, on a clock that ticks once per step that runs them (every decoder
    # runs in each such step): a decoder that joins at tick d0 has ctx = base + d at tick d
    # (base = tokens in its cache + 1 - d0), needs a new block at tick d when
    # (base - 1 + d) % bs == 0, and runs its last tick at `last`.
    dec_base: dict[int, int] = {}
    dec_last: dict[int, int] = {}
    dec_join: dict[int, int] = {}
    heap: list[tuple[int, int]] = []
    phase = [0] * bs
    n_dec = 0
    sum_base = 0
    tick = 0
    free = blocks_total
    reserve = engine.reserve_full
    reserved = 0  # blocks promised to running requests' whole lengths (reserve_full)
    held = [0] * n  # blocks held by a prefilling request (decoders: from their context)
    apart = not engine.mixed_prefill  # prefill chunks and decodes never share a step
    whole = not engine.chunked_prefill  # a prompt enters whole, in one step
    margin = engine.admit_margin * blocks_total
    # batch waiting (TRT-LLM): steps in a row that held the prefills back
    wait_iters = engine.batch_wait_iters if engine.batch_wait_tokens > 0 else 0
    wait_tokens = engine.batch_wait_tokens * budget
    waited = 0
    # room kept for answers (SGLang's new_token_ratio): the running decoders' answers still to
    # come are sum(dec_last) - n_dec * (tick - 1), less what passes the clip (`big`: decoders
    # with more than `clip` tokens to come, by their last tick)
    ratio0 = engine.new_token_ratio
    ratio = ratio0
    ratio_floor = ratio0 * engine.new_token_ratio_min
    ratio_decay = (ratio0 - ratio_floor) / engine.new_token_ratio_steps
    clip = engine.answer_clip
    sum_last = 0
    big: dict[int, int] = {}
    big_heap: list[tuple[int, int]] = []
    sum_big = 0
    now = 0.0
    step = 0
    preempted = 0
    finished = 0
    series = _Series()

    def blocks_for(tokens: int) -> int:
        return -(-tokens // bs)

    def leave_decode(i: int) -> int:
        """Take decoder i out of the aggregates before tick `tick` runs; its blocks."""
        nonlocal n_dec, sum_base, sum_last, sum_big
        base = dec_base.pop(i)
        sum_last -= dec_last.pop(i)
        if i in big:
            sum_big -= big.pop(i)
        gen[i] += tick - dec_join.pop(i)  # a token per tick it ran
        n_dec -= 1
        sum_base -= base
        phase[(base - 1) % bs] -= 1
        return blocks_for(base + tick - 1)  # its context after the last tick it ran

    def preempt(block_taken: bool) -> None:
        """Preempt the most recently admitted request (block_taken: this tick's decode blocks
        are already taken from `free`)."""
        nonlocal free, preempted, reserved
        victim = next(reversed(order))
        del order[victim]
        if reserve:
            reserved -= reserved_blocks(victim)
        if victim in dec_base:
            if block_taken and (dec_base[victim] - 1 + tick) % bs == 0:
                free += 1
            free += leave_decode(victim)
        else:
            prefilling.remove(victim)
            free += held[victim]
        held[victim] = 0
        todo[victim] = prompt[victim] + gen[victim]
        done[victim] = 0
        waiting.appendleft(victim)
        preempted += 1

    def take_decode_blocks() -> int:
        """Take the blocks this tick's decodes need, preempting while the cache lacks them;
        the decoders that run."""
        nonlocal free, ratio
        need = phase[(-tick) % bs]
        before = preempted
        while need > free and order:
            preempt(False)
            need = phase[(-tick) % bs] if n_dec else 0
        free -= need
        if ratio0 and preempted != before:
            ratio = retract_ratio()
        return n_dec

    def answers_to_come() -> int:
        """The running decoders' answer tokens still to come, each at most `clip`."""
        nonlocal sum_big
        while big_heap and big_heap[0][0] <= tick:  # at most `clip` to come now
            at, i = heapq.heappop(big_heap)
            if big.get(i) == at + clip - 1:
                sum_big -= big.pop(i)
        over = sum_big - len(big) * (tick - 1 + clip)
        return sum_last - n_dec * (tick - 1) - over

    def retract_ratio() -> float:
        so_far = sum(gen[i] + tick - dec_join[i] for i in dec_join)
        return retract_share(so_far, sum(output[i] for i in dec_join), len(dec_join))

    def reserved_blocks(i: int) -> int:
        """The blocks a reserving engine keeps for request i's whole life: its prompt and every
        answer token but the last."""
        return blocks_for(prompt[i] + output[i] - 1)

    def admission(i: int, left: int, free_now: int, reserved_now: int, busy: bool,
                  promised: int = 0) -> tuple[int, int, int] | None:  # fmt: skip
        """Whether waiting request i can join a step with `left` tokens of budget, `free_now`
        free blocks and `reserved_now` reserved (busy: the step already runs something;
        promised: answer tokens kept for the requests this step has admitted): its chunk, the
        blocks the chunk takes and the blocks it reserves; None if it cannot."""
        rest = todo[i] or prompt[i]
        c = min(rest, left)
        if whole and c < rest:
            return None
        if margin and busy and free_now < margin:
            return None  # the safety margin: the cache is kept for the running requests
        extra = blocks_for(c)
        # an engine that keeps prefills apart admits a prompt only when all of it fits
        # (SGLang's PrefillAdder), so its later chunks never preempt it
        if extra > free_now or (apart and blocks_for(rest) > free_now):
            return None
        if ratio0:
            room = free_now * bs - promised - ratio * answers_to_come()
            if rest + min(output[i] - gen[i], clip) >= room:
                return None
        keep = reserved_blocks(i) if reserve else 0
        if reserve and reserved_now + keep > blocks_total:
            return None
        return c, extra, keep

    def held_back(decodes: int, left: int, may_admit: bool) -> bool:
        """Batch waiting: whether this step runs its decodes alone, the prefills it would
        schedule (every running prompt, then the waiting ones it would admit) held back until
        their whole prompts and the decodes reach wait_tokens or wait_iters steps have waited
        (TRT-LLM's PyExecutor._waiting_requests, on what its scheduler admitted)."""
        nonlocal waited
        tokens, seqs, free_now, reserved_now = decodes, len(order), free, reserved
        scheduled = False
        for i in prefilling:
            if left <= 0:
                break
            tokens += prompt[i]
            left -= todo[i] - done[i]
            scheduled = True
        for i in waiting if may_admit else ():
            if left <= 0 or seqs >= max_seqs:
                break
            got = admission(i, left, free_now, reserved_now, True)
            if got is None:
                break
            c, extra, keep = got
            tokens += prompt[i]
            left, free_now, seqs = left - c, free_now - extra, seqs + 1
            reserved_now += keep
            scheduled = True
        if not scheduled:
            return False
        if waited < wait_iters and tokens < wait_tokens:
            waited += 1
            return True
        waited = 0
        return False

    def join_decode(i: int) -> None:
        """Request i has just sampled a token; it decodes from the next tick."""
        nonlocal n_dec, sum_base, sum_last, sum_big
        base = done[i] + 1 - tick
        dec_base[i] = base
        last = tick + output[i] - gen[i] - 1
        dec_last[i] = last
        sum_last += last
        if ratio0 and last - tick + 1 > clip:
            big[i] = last
            sum_big += last
            heapq.heappush(big_heap, (last - clip + 1, i))
        dec_join[i] = tick
        heapq.heappush(heap, (last, i))
        phase[(base - 1) % bs] += 1
        n_dec += 1
        sum_base += base

    def end_request(i: int) -> None:
        nonlocal finished, reserved
        if reserve:
            reserved -= reserved_blocks(i)
        finish[i] = now
        finished += 1
        del order[i]
        if pending:  # a closed loop: the user sends its next request
            j = pending.popleft()
            arrival[j] = now
            late.append(j)

    while finished < n:
        if step >= MAX_STEPS:
            raise InputError(f"the simulation passed {MAX_STEPS:,} steps; fewer requests")
        while upcoming and arrival[upcoming[0]] <= now:
            waiting.append(upcoming.popleft())
        # A closed-loop user learns that its request ended when the step that ended it returns;
        # by the time its next request reaches the engine, the engine has formed the next step
        # without it: it joins the one after (an idle engine takes it at once).
        waiting.extend(deferred)
        deferred, late = late, []
        if not order and not waiting and deferred:
            waiting.extend(deferred)
            deferred = []
        if not order and not waiting:
            now = arrival[upcoming[0]]
            ratio = ratio0  # an idle engine starts its estimate again
            continue
        # ---- schedule this step
        left = budget
        head = waiting[0] if waiting else -1
        # Without chunked prefill a prompt that can be admitted runs whole, before the decodes
        # (vLLM V0); an engine that keeps prefills and decodes apart (SGLang) runs a step of
        # prefill chunks whenever a prompt is under way or the next one can be admitted.
        admittable = (head >= 0 and len(order) < max_seqs
                      and admission(head, budget, free, reserved, False) is not None)  # fmt: skip
        prefill_only = apart and (bool(prefilling) or admittable)
        preempted_before = preempted
        decodes = 0
        if not prefill_only and n_dec:
            decodes = take_decode_blocks()
            left -= decodes
        chunks: list[tuple[int, int]] = []
        ran: list[tuple[int, int]] = []  # (request, tokens) of the prefills in this step
        promised = 0  # answer tokens kept for the prompts this step completes or admits
        hold = bool(wait_iters and decodes) and held_back(
            decodes, left, preempted == preempted_before
        )
        for i in list(prefilling):
            if left <= 0 or hold:
                break
            if i not in order:
                continue
            c = min(todo[i] - done[i], left)
            extra = blocks_for(done[i] + c) - held[i]
            while extra > free and i in order:
                preempt(decodes > 0)
            if i not in order:
                continue
            free -= extra
            held[i] += extra
            if ratio0 and done[i] + c == todo[i]:  # its last chunk: its answer is kept
                promised += min(output[i] - gen[i], clip)  # (SGLang's add_chunked_req)
            chunks.append((c, done[i]))
            ran.append((i, c))
            left -= c
        decodes = n_dec if decodes else 0  # decoders preempted above do not run
        # a step that preempted admits nothing new (vLLM V1: the victims would come straight
        # back); an engine that keeps prefills apart admits none into a step of decodes
        while (waiting and left > 0 and len(order) < max_seqs and preempted == preempted_before
               and not hold and not (apart and decodes)):  # fmt: skip
            i = waiting[0]
            got = admission(i, left, free, reserved, bool(chunks or decodes), promised)
            if got is None:
                break
            c, extra, keep = got
            if ratio0 and c == (todo[i] or prompt[i]):  # a whole prompt: its answer is kept
                promised += min(output[i] - gen[i], clip)
            if todo[i] == 0:
                todo[i] = prompt[i]
            reserved += keep
            waiting.popleft()
            free -= extra
            held[i] = extra
            order[i] = None
            prefilling.append(i)
            chunks.append((c, 0))
            ran.append((i, c))
            left -= c
        if apart and prefill_only and not chunks and n_dec:  # no chunk could run: decode
            decodes = take_decode_blocks()
        if not chunks and not decodes:
            if not upcoming:  # nothing runs and nothing can be admitted
                raise DoesNotFit("the KV cache cannot hold the next request; add GPUs (--tp)")
            now = max(now, arrival[upcoming[0]])
            continue
        # ---- run it
        sum_ctx = sum_base + n_dec * tick if decodes else 0
        completes = sum(1 for i, c in ran if done[i] + c == todo[i])
        if planned is None:
            dt = timer.step_s(tuple(chunks), decodes, sum_ctx, decodes + completes)
        else:  # the gathered SDPA's (queries, keys): cuDNN plans each shape once
            shape = (decodes + sum(c for c, _ in chunks), sum_ctx + sum(c + p for c, p in chunks))
            dt = timer.step_s(tuple(chunks), decodes, sum_ctx, decodes + completes,
                              new_shape=shape not in planned)  # fmt: skip
            planned.add(shape)
        now += dt
        step += 1
        if decodes:
            tick += 1
            if ratio0 and preempted == preempted_before:
                ratio = max(ratio - ratio_decay, ratio_floor)
            while heap and heap[0][0] <= tick - 1:  # decoders whose last tick just ran
                last, i = heapq.heappop(heap)
                if dec_last.get(i) != last:
                    continue  # preempted since
                free += leave_decode(i)
                end_request(i)
        for i, c in ran:  # prefills: progress; a finished prompt samples a token
            done[i] += c
            if done[i] == todo[i]:
                prefilling.remove(i)
                gen[i] += 1
                if gen[i] == 1:
                    first[i] = now
                if gen[i] >= output[i]:
                    free += held[i]
                    held[i] = 0
                    end_request(i)
                else:
                    held[i] = 0  # its blocks are counted from its context from now on
                    join_decode(i)
        used = blocks_total - free
        series.add(now, dt, decodes + len(chunks), used / blocks_total if blocks_total else 0.0)
        if progress is not None and step % 256 == 0:
            progress(finished, n)
    if progress is not None:
        progress(n, n)
    dur = series.dur or 1.0
    return ServeResult(
        arrival, first, finish, prompt, output, step, preempted, blocks_total * bs,
        series.sum_b / dur, series.sum_kv / dur, series.peak,
        {"t_s": series.t, "batch": series.batch, "kv": series.kv},
    )  # fmt: skip
