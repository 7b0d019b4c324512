"""How fast is prediction? CLI start-to-finish, predictions/s through the API, and what the
predict path imports.

Budgets (issue 13): `gpuperf predict llama2-7b --gpu h100` within 0.3 s wall on 2 cores (cold:
median of 5 fresh processes, each printed); one API prediction of llama2-7b (and of llama2-70b,
80 layers) within 0.5 ms each; building llama2-70b's op list within 5 ms; neither torch nor
pandas nor numpy imported on the predict path (pandas and numpy alone took ~0.5 s to import).

Run: .venv/bin/python benchmarks/predict_speed.py
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

CLI_ARGS = ["predict", "llama2-7b", "--gpu", "h100"]
COLD_BUDGET_S = 0.3
API_BUDGET_S = 0.5e-3
HEAVY = ("torch", "pandas", "numpy")
IMPORT_PROBE = (
    "import sys\n"
    "from gpuperf.cli import main\n"
    "try:\n"
    "    main({args!r})\n"
    "except SystemExit:\n"
    "    pass\n"
    "sys.stderr.write('HEAVY=' + ','.join(m for m in {heavy!r} if m in sys.modules))\n"
)


def gpuperf_cmd() -> list[str]:
    script = Path(sys.executable).parent / "gpuperf"
    if script.exists():
        return [str(script)]
    found = shutil.which("gpuperf")
    return [found] if found else [sys.executable, "-m", "gpuperf.cli"]


def cli_seconds(runs: int = 5) -> list[float]:
    """Wall times of the command in fresh processes (output discarded), after one run that warms
    the file cache."""
    cmd = [*gpuperf_cmd(), *CLI_ARGS]
    subprocess.run(cmd, check=True, capture_output=True)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def api_seconds(model: str, budget_s: float = 1.0) -> tuple[float, int]:
    """Median seconds of api.predict(model).total_ms (name resolution included; the per-op table
    is not built), and the op count."""
    from gpuperf import api
    from gpuperf.step.columns import nrows

    pred = api.predict(model, gpu="h100")
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while time.perf_counter() < deadline or len(times) < 5:
        start = time.perf_counter()
        api.predict(model, gpu="h100").total_ms  # noqa: B018 (the number a caller reads)
        times.append(time.perf_counter() - start)
    return statistics.median(times), nrows(pred.columns)


def build_ops_seconds() -> float:
    """Best of 5: the op list of llama2-70b's 4096-token prefill (80 layers)."""
    from gpuperf.workloads.config import load_model
    from gpuperf.workloads.scenario import Scenario
    from gpuperf.workloads.transformer import build_ops

    cfg, sc = load_model("llama2-70b"), Scenario(mode="prefill", batch=1, seq=4096)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        build_ops(cfg, sc)
        best = min(best, time.perf_counter() - start)
    return best


def heavy_imports(args: list[str]) -> list[str]:
    """Which of HEAVY the command leaves in sys.modules (run in a fresh interpreter)."""
    code = IMPORT_PROBE.format(args=args, heavy=HEAVY)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    found = res.stderr.rpartition("HEAVY=")[2].strip()
    return found.split(",") if found else []


def main() -> int:
    table = Table(title="gpuperf prediction speed")
    for header in ("what", "measured", "budget", "ok"):
        table.add_column(header, justify="left" if header == "what" else "right")

    def row(what: str, value: str, budget: str, ok: bool) -> None:
        table.add_row(what, value, budget, Text("yes", "green") if ok else Text("NO", "bold red"))

    runs = cli_seconds()
    t_cli = statistics.median(runs)
    each = ", ".join(f"{t:.2f}" for t in runs)
    row(f"cold start: gpuperf {' '.join(CLI_ARGS)} (s, median of 5: {each})", f"{t_cli:.3f}",
        f"<= {COLD_BUDGET_S}", t_cli <= COLD_BUDGET_S)  # fmt: skip
    for model in ("llama2-7b", "llama2-70b"):
        t, n_ops = api_seconds(model)
        row(
            f"in-process: api.predict({model!r}).total_ms (ms; {n_ops} kernels; "
            f"{1 / t:,.0f} predictions/s)",
            f"{t * 1e3:.3f}",
            f"<= {API_BUDGET_S * 1e3}",
            t <= API_BUDGET_S,
        )
    t_ops = build_ops_seconds()
    row("build_ops(llama2-70b, prefill 4096) (ms, best of 5)", f"{t_ops * 1e3:.2f}", "< 5",
        t_ops < 5e-3)  # fmt: skip
    for args in (CLI_ARGS, [*CLI_ARGS, "--format", "json"], ["predict", "gemm", "4096"]):
        used = heavy_imports(args)
        row(f"{'/'.join(HEAVY)} imported by gpuperf {' '.join(args)}", ", ".join(used) or "none",
            "none", not used)  # fmt: skip
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 120)
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
