"""gpuperf.measure.serve_hf's request submission (the GPU run itself is on the device): a closed
loop keeps at most `concurrency` requests in flight and releases the next, in order, as one ends;
the replay simulates the same closed loop."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from gpuperf.measure.serve_hf import _managed, replay


class _Result:
    def __init__(self, request_id: str) -> None:
        self.request_id = request_id

    def is_finished(self) -> bool:
        return True


class _Manager:
    """Runs each request for a few ms on its own thread; records what was in flight."""

    def __init__(self) -> None:
        self.out: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.order: list[str] = []
        self.threads: set[int] = set()

    def warmup(self) -> None: ...
    def start(self) -> None: ...
    def stop(self, block: bool = True) -> None: ...

    def add_request(self, prompt, request_id, max_new_tokens, record_timestamps):  # noqa: ANN001, ANN201
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.order.append(request_id)
            self.threads.add(threading.get_ident())

        def finish() -> None:
            time.sleep(0.002 * max_new_tokens)
            with self.lock:
                self.in_flight -= 1
            self.out.put(_Result(request_id))

        threading.Thread(target=finish, daemon=True).start()

    def get_result(self, timeout: float = 0) -> _Result | None:
        try:
            return self.out.get(timeout=timeout)
        except queue.Empty:
            return None


class _Model:
    def __init__(self) -> None:
        self.mgr = _Manager()

    def init_continuous_batching(self, **kw):  # noqa: ANN003, ANN201
        return self.mgr


def test_closed_loop_keeps_the_users_busy_and_releases_requests_in_order():
    model = _Model()
    reqs = [[0.0, 8, n] for n in (3, 1, 2, 1, 3, 2, 1)]
    results, _ = _managed(model, None, None, reqs, [[1]] * len(reqs), users=3)
    mgr = model.mgr
    assert [r.request_id for r in results] == [f"r{i}" for i in range(len(reqs))]
    assert mgr.order == [f"r{i}" for i in range(len(reqs))]
    assert mgr.most == 3  # never more than the users, and all of them busy at the start
    assert mgr.threads == {threading.get_ident()}  # submitted from the caller's thread only


def test_open_loop_submits_at_the_arrival_times():
    model = _Model()
    reqs = [[0.0, 8, 1], [0.02, 8, 1], [0.04, 8, 1]]
    start = time.perf_counter()
    results, _ = _managed(model, None, None, reqs, [[1]] * 3)
    assert len(results) == 3 and time.perf_counter() - start >= 0.04
    assert model.mgr.most <= 2


def test_replay_of_a_closed_loop_simulates_the_closed_loop():
    rows = [{"scheduled_arrival_s": 0.0, "input_tokens": 256, "asked_output_tokens": 32}
            for _ in range(32)]  # fmt: skip
    cb = {"num_blocks": 512, "block_size": 256, "max_batch_tokens": 2048}
    closed = replay({"requests": rows, "cb": cb, "concurrency": 4}, "llama3.2-1b", "h200")
    burst = replay({"requests": rows, "cb": cb}, "llama3.2-1b", "h200")
    assert closed.summary["mean_batch"] <= 4 < burst.summary["mean_batch"]
    assert closed.summary["wall_s"] > burst.summary["wall_s"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_reader_that_fails_does_not_hang_the_closed_loop():
    from gpuperf.errors import GpuperfError

    model = _Model()

    def broken(timeout: float = 0) -> None:
        raise RuntimeError("manager died")

    model.mgr.get_result = broken
    reqs = [[0.0, 8, 1]] * 4
    with pytest.raises(GpuperfError, match="returned no result"):
        _managed(model, None, None, reqs, [[1]] * 4, users=2)
