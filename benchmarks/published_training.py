"""Published H100 training runs against gpuperf's plan path, fitted to nothing there.

Every row of benchmarks/data/published_training_h100.csv is one published pre-training result
on H100s: NVIDIA's Megatron-Bridge and NeMo performance tables (DGX-H100, per container
release), NeMo's long-sequence table, the Megatron-LM README's weak-scaling table, Table 4 of
the Llama 3 paper and NeMo AutoModel's table. The file keeps what each source states (its URL,
GPUs, batch, sequence, TP/PP/CP/VP/EP/FSDP, tokens/s or TFLOP/s per GPU) and, apart, what it
does not state and gpuperf has to assume (`options`, said in words in `assume`). A row whose
model gpuperf cannot express says why in `note` and counts against expressibility.

How each source's runs are described (what their recipes do; nothing here is tuned to the
rows):
- Megatron-Core (Megatron-Bridge, NeMo, Megatron-LM): the distributed optimizer (ZeRO-1), or
  FSDP (ZeRO-3) where the table gives an FSDP size; gradient reduce-scatter and parameter
  all-gather overlapped with the backward and the next forward; TP communication overlap with
  sequence parallelism; no activation recomputation, unless the release's recipe recomputes
  modules (its --recompute-modules, in the row's options); the interleaved schedule where VP > 1;
  fp8 GEMMs where the precision says FP8; NVIDIA's performance recipes (Megatron-Bridge, NeMo)
  also reduce gradients in bf16 (grad_reduce_in_fp32=False).
- NeMo AutoModel: PyTorch FSDP2 over Transformer Engine layers (ZeRO-3, prefetch overlap;
  ZeRO-2 where a pipelined recipe keeps the gathered parameters, reshard_after_forward
  false), its MoE models built in bf16 and stepped by torch.optim's Adam (the row's
  optimizer=torch).
- Llama 3: FSDP that keeps the gathered weights through the backward (ZeRO-2), as the paper
  describes.

The measured step: global batch × sequence / (tokens/s per GPU × GPUs) where the source gives
tokens/s; otherwise from its TFLOP/s per GPU with PaLM's model FLOPs per token
(gpuperf.step.mfu: Megatron-LM's count for a GPT, attention in full, as it counted until it
halved causal attention; Megatron-Bridge's TFLOP/s count causal attention at half, which its
tokens/s make moot: tests/unit/test_published_training.py).

    .venv/bin/python benchmarks/published_training.py            # every row, then the summary
    .venv/bin/python benchmarks/published_training.py --markdown # the README's summary table
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from gpuperf import api  # noqa: E402
from gpuperf.errors import InputError  # noqa: E402
from gpuperf.step.mfu import model_flops_per_token  # noqa: E402
from gpuperf.workloads.config import load_model  # noqa: E402
from gpuperf.workloads.scenario import Scenario  # noqa: E402

DATA = HERE / "data" / "published_training_h100.csv"
TARGET = 0.10  # median |error|, issue 12
EXPRESSIBLE = 0.95  # of the configurations


def rows() -> list[dict[str, str]]:
    with DATA.open(newline="") as f:
        return list(csv.DictReader(f))


def _int(row: dict[str, str], key: str, default: int = 1) -> int:
    return int(row[key]) if row[key] else default


def model(row: dict[str, str]):  # noqa: ANN201 (a ModelConfig)
    """The row's model: a preset name, or a config file beside the data."""
    name = row["config"]
    return load_model(str(HERE / "data" / name) if name.endswith(".json") else name)


def options(row: dict[str, str]) -> dict:
    """api.predict's keyword arguments for the row, by its source's recipe (module docstring)
    and the row's own `options`."""
    gpus, tp, pp, cp = (_int(row, k) for k in ("gpus", "tp", "pp", "cp"))
    vp, fsdp = _int(row, "vp"), _int(row, "fsdp", 0)
    dp = gpus // (tp * pp * cp)
    kw = dict(mode="train", system="dgx-h100", nodes=max(1, gpus // 8), tp=tp, pp=pp, cp=cp,
              dp=dp, ep=_int(row, "ep"), global_batch=int(row["gbs"]),
              micro_batch=_int(row, "mbs"), seq=int(row["seq"]), dp_overlap=True,
              dtype="fp8" if "FP8" in row["precision"] else "bf16")  # fmt: skip
    table = row["table"]
    if table.startswith("llama 3 herd"):
        kw.update(zero=2, tp_overlap=tp > 1)
    elif table.startswith("nemo automodel"):
        kw.update(zero=3)
    else:  # Megatron-Core
        kw.update(zero=3 if fsdp else 1, tp_overlap=tp > 1)
        if table.startswith(("megatron-bridge", "nemo 2")):  # NVIDIA's performance recipes
            kw.update(grad_dtype="param")
    if vp > 1:
        kw.update(schedule="interleaved", virtual_stages=vp)
    for item in row["options"].split():
        key, value = item.split("=")
        kw[key] = (
            int(value) if value.isdigit() else {"true": True, "false": False}.get(value, value)
        )
        if key == "recompute_modules":  # Megatron's --recompute-modules, a list
            kw[key] = tuple(value.split(","))
    return kw


def measured_s(row: dict[str, str]) -> float:
    """The published step time (module docstring)."""
    tokens = int(row["gbs"]) * int(row["seq"])
    gpus = int(row["gpus"])
    if row["tokens_per_s_per_gpu"]:
        return tokens / (float(row["tokens_per_s_per_gpu"]) * gpus)
    sc = Scenario(mode="train", seq=int(row["seq"]))
    per_token, _ = model_flops_per_token(model(row), sc)
    return tokens * per_token / (float(row["tflops_per_gpu"]) * 1e12 * gpus)


@dataclass
class Result:
    row: dict[str, str]
    measured_s: float | None = None
    predicted_s: float | None = None
    fits: bool | None = None
    why_not: str = ""  # not expressible (or not evaluated), and why

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1  # type: ignore[operator]


def evaluate(row: dict[str, str]) -> Result:
    if not row["config"]:
        return Result(row, why_not=row["note"])
    cfg = model(row)
    kw = options(row)
    try:
        p = api.predict(cfg, **kw)
    except InputError as exc:
        return Result(row, why_not=f"gpuperf refuses the plan: {exc}")
    return Result(row, measured_s(row), p.total_ms / 1e3, p.fits)


# The two kinds of rows the summary (and gpuperf's track record) report apart.
ARCHS = [("dense", lambda r: r.row["arch"] == "dense"),
         ("mixture of experts (and hybrid)", lambda r: r.row["arch"] != "dense")]  # fmt: skip


def _median(results: list[Result]) -> str:
    errs = [abs(r.error) for r in results]
    if not errs:
        return "–"
    return f"{statistics.median(errs):.1%} (n={len(errs)})"


def summary(results: list[Result]) -> list[tuple[str, str, str, str]]:
    """(class, expressible of the rows evaluated, median |error|, within 10% / 20%)."""
    out = []
    classes = [*ARCHS, ("every row", lambda r: True)]
    for name, keep in classes:
        rs = [r for r in results if keep(r)]
        evaluated = [r for r in rs if not r.row["note"].startswith("not evaluated")]
        ok = [r for r in evaluated if not r.why_not]
        within = f"{sum(abs(r.error) <= 0.1 for r in ok)} / {sum(abs(r.error) <= 0.2 for r in ok)}"
        out.append((name, f"{len(ok)} of {len(evaluated)}", _median(ok), within))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="only the summary, as Markdown")
    args = ap.parse_args()
    results = [evaluate(r) for r in rows()]
    if not args.markdown:
        print(f"{'table':26s} {'model':24s} {'GPUs':>5s} {'plan':26s} {'dtype':5s} "
              f"{'measured (s)':>12s} {'predicted (s)':>13s} {'error':>7s}  fits")  # fmt: skip
        for r in results:
            w = r.row
            kw = options(w)
            etp = " etp1" if kw.get("etp") == 1 else ""
            plan = (f"tp{kw['tp']} pp{kw['pp']} cp{kw['cp']} v{kw.get('virtual_stages', 1)} "
                    f"ep{kw['ep']}{etp} zero{kw['zero']}")  # fmt: skip
            head = f"{w['table']:26s} {w['model']:24s} {w['gpus']:>5s} {plan:26s}"
            if r.why_not:
                print(f"{head} {r.why_not}")
                continue
            dtype = kw["dtype"]
            print(f"{head} {dtype:5s} {r.measured_s:12.2f} {r.predicted_s:13.2f} "
                  f"{r.error:+7.1%}  {'yes' if r.fits else 'no'}")  # fmt: skip
        print()
    print("| published H100 training runs | expressible | median error | within 10% / 20% |")
    print("|---|---|---|---|")
    for name, expr, med, within in summary(results):
        print(f"| {name} | {expr} | {med} | {within} |")
    print("\n| source (dense runs) | n | median error | signed median | range |")
    print("|---|---|---|---|---|")

    def group(r: Result) -> str:  # Megatron-Bridge's releases together
        return r.row["table"].split(" ")[0] if "bridge" in r.row["table"] else r.row["table"]

    for source in dict.fromkeys(group(r) for r in results):
        rs = [r for r in results if group(r) == source
              and r.row["arch"] == "dense" and not r.why_not]  # fmt: skip
        if rs:
            e = sorted(r.error for r in rs)
            print(
                f"| {source} | {len(rs)} | {statistics.median(abs(x) for x in e):.1%} | "
                f"{statistics.median(e):+.1%} | {e[0]:+.0%} to {e[-1]:+.0%} |"
            )
    if not args.markdown:
        dense = [r for r in results if r.row["arch"] == "dense" and not r.why_not]
        med = statistics.median(abs(r.error) for r in dense)
        print(f"\ndense median {med:.1%} (target {TARGET:.0%}: {'yes' if med <= TARGET else 'NO'})")


if __name__ == "__main__":
    main()
