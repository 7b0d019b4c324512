"""On a real GPU: the whole eager layer (checked against fp64, 40 kernels, graph vs eager timing,
prediction within reach) and the live calibration set (runs in about a minute, fits well)."""

from __future__ import annotations

import math
import statistics
import time

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from gpuperf.measure import calibration as calib  # noqa: E402
from gpuperf.measure import eager_layer as el  # noqa: E402
from gpuperf.measure.timing import Budget  # noqa: E402
from gpuperf.perfmodel import calibrate as cal  # noqa: E402
from gpuperf.workloads.config import load_model  # noqa: E402
from gpuperf.workloads.scenario import Scenario  # noqa: E402

B = Budget(warmup_ms=10, rep_ms=50)


def _spec():
    try:
        from gpuperf.hardware.detect import detect_gpu

        return detect_gpu(0)
    except Exception:
        return None


@pytest.mark.parametrize(
    "sc",
    [Scenario(mode="prefill", batch=1, seq=2048), Scenario(mode="decode", batch=8, ctx=2048)],
    ids=["prefill", "decode"],
)
def test_llama3_layer_on_gpu(sc):
    cfg = load_model("llama3-8b")
    run = el.measure_layer(cfg, sc, "cuda", B)
    assert run.kernels_run == len(run.ops) == 40
    assert run.check_err <= el.LAYER_TOLERANCE["bf16"]
    assert run.graph is not None and "cuda events" in run.graph.method
    # The graph takes the host out: never slower than eager calls (a little noise allowed).
    assert run.graph.median_s <= 1.05 * run.eager.median_s
    assert 1e-6 < run.host_per_kernel_s < 100e-6
    spec = _spec()
    if spec is None:
        pytest.skip("no profile for this GPU: measured only")
    rows = {r["what"]: r for r in el.compare(run, spec, sc)}
    # Accuracy is the point: the GPU time of 40 real kernels within 1.5x of the op-sum prediction,
    # and the queue simulation with this layer's own host cost within 1.5x of the eager run.
    for what in ("GPU time", "with host dispatch (this layer's host cost)"):
        r = rows[what]
        assert 1 / 1.5 < r["predicted_ms"] / r["measured_ms"] < 1.5, r


def test_calibration_set_on_gpu_runs_fast_and_fits():
    spec = _spec()
    if spec is None:
        pytest.skip("no profile for this GPU")
    t0 = time.perf_counter()
    samples = calib.measure_calibration_set(spec, "cuda")
    wall = time.perf_counter() - t0
    assert wall < 120  # ≲ 60 s on an H100; slack for slower GPUs
    assert len(samples) >= 0.9 * len(calib.calibration_ops("cuda"))
    names = calib.constrained_params([s.op for s in samples], spec)
    fitted = cal.with_params(spec, **{n: cal.param_value(cal.fit(samples, spec, names), n)
                                      for n in names})  # fmt: skip
    errs = [abs(e) for e in cal.log_errors(samples, fitted)]
    assert statistics.median(errs) < math.log(1.25)  # median op within 25% after the fit
    d = calib.measure_host_dispatch("cuda")
    assert 1e-6 < d < 50e-6
