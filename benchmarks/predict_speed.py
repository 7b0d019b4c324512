"""How fast is prediction? CLI start-to-finish, predictions/s through the API, and no torch.

Targets (issue 13): `gpuperf predict llama2-7b --gpu h100 --seq 2048` within 0.3 s wall on 2 cores
(median of 5 fresh processes); one API prediction of llama2-7b and of llama2-70b (80 layers)
within 0.5 ms each; building llama2-70b's op list within 5 ms; torch never imported on the
predict path.

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

CLI_ARGS = ["predict", "llama2-7b", "--gpu", "h100", "--seq", "2048"]
TORCH_PROBE = (
    "import sys\n"
    "from gpuperf.cli import main\n"
    "try:\n"
    "    main({args!r})\n"
    "except SystemExit:\n"
    "    pass\n"
    "sys.stderr.write('TORCH=%s' % ('torch' in sys.modules))\n"
)


def gpuperf_cmd() -> list[str]:
    script = Path(sys.executable).parent / "gpuperf"
    if script.exists():
        return [str(script)]
    found = shutil.which("gpuperf")
    return [found] if found else [sys.executable, "-m", "gpuperf.cli"]


def cli_seconds(runs: int = 5) -> float:
    """Median wall time of the demo command in fresh processes (output discarded)."""
    cmd = [*gpuperf_cmd(), *CLI_ARGS]
    subprocess.run(cmd, check=True, capture_output=True)  # warm the file cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def api_seconds(model: str, budget_s: float = 1.0) -> tuple[float, int]:
    """Median seconds per api.predict(model) (name resolution included), and the op count."""
    from gpuperf import api

    pred = api.predict(model, gpu="h100", seq=2048)
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while time.perf_counter() < deadline or len(times) < 5:
        start = time.perf_counter()
        api.predict(model, gpu="h100", seq=2048)
        times.append(time.perf_counter() - start)
    return statistics.median(times), len(pred.table)


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


def torch_imported(args: list[str]) -> bool:
    code = TORCH_PROBE.format(args=args)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return "TORCH=True" in res.stderr


def main() -> int:
    table = Table(title="gpuperf prediction speed")
    for header in ("what", "measured", "target", "ok"):
        table.add_column(header, justify="left" if header == "what" else "right")

    def row(what: str, value: str, target: str, ok: bool) -> None:
        table.add_row(what, value, target, Text("yes", "green") if ok else Text("NO", "bold red"))

    t_cli = cli_seconds()
    row("gpuperf " + " ".join(CLI_ARGS) + " (s, median of 5)", f"{t_cli:.3f}", "<= 0.3",
        t_cli <= 0.3)  # fmt: skip
    for model in ("llama2-7b", "llama2-70b"):
        t, n_ops = api_seconds(model)
        row(
            f"api.predict({model!r}) (ms; {n_ops} kernels; {1 / t:,.0f} predictions/s)",
            f"{t * 1e3:.2f}",
            "<= 0.5",
            t <= 0.5e-3,
        )
    t_ops = build_ops_seconds()
    row("build_ops(llama2-70b, prefill 4096) (ms, best of 5)", f"{t_ops * 1e3:.2f}", "< 5",
        t_ops < 5e-3)  # fmt: skip
    for args in (CLI_ARGS, ["predict", "gemm", "4096"]):
        used = torch_imported([*args, "--format", "json"])
        row("torch imported by gpuperf " + " ".join(args), "yes" if used else "no", "no", not used)
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 120)
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
