"""Every numerical claim of the seed documents against gpuperf (and committed measurements).

    python benchmarks/seed_claims.py              # markdown tables, one per seed, to stdout
    python benchmarks/seed_claims.py --seed 004   # one seed
    python benchmarks/seed_claims.py --write      # regenerate the tables in docs/seed-claims.md

The claims are data, one [[claim]] each in seed_claims.toml beside this file; the verdict rule, the
measurement look-ups and the helpers their expressions call are in seed_claims_core.py. A claim's
`predict` and `measured` are expressions evaluated in that module's namespace, and the call the doc
prints is that expression, as it ran. Numbers are never typed into the doc: gpuperf's come from its
Python API here, measured ones from benchmarks/results/<gpu>/*.json.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from seed_claims_core import Claim, Pred, Verdict, evaluate  # noqa: E402

DOC = HERE.parent / "docs" / "seed-claims.md"
DATA = HERE / "seed_claims.toml"
BEGIN, END = "<!-- BEGIN GENERATED (benchmarks/seed_claims.py) -->", "<!-- END GENERATED -->"
TITLES = {
    "000": "000 — PyTorch → GPU pipeline, Llama-2-7B on an H100",
    "001": "001 — cuBLAS, cuDNN, NCCL",
    "002": "002 — GPU architecture and performance (lecture)",
    "003": "003 — GPU programming: benchmarking, fusion, GELU/softmax",
    "004": "004 — Q&A: attention, KV cache, roofline, parallelism",
}


def data_rows(path: Path = DATA) -> list[dict]:
    """The [[claim]] tables of the data file, as tomllib reads them."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    return tomllib.loads(path.read_text(encoding="utf-8"))["claim"]


def all_claims(path: Path = DATA) -> list[Claim]:
    """Every claim of the data file, its expressions compiled (a syntax error names the claim)."""
    import seed_claims_core

    ns = vars(seed_claims_core)
    out = []
    seen: set[str] = set()
    for i, row in enumerate(data_rows(path), 1):
        cid = row.get("id", "")
        if cid in seen or not cid.startswith(f"{row['seed']}."):
            raise SystemExit(f"{path.name} claim {i}: id {cid!r} is a duplicate or not "
                             f"{row['seed']}.<nn>")  # fmt: skip
        seen.add(cid)
        fns = {}
        for key in ("predict", "measured"):
            if key in row:
                code = compile(row[key], f"{path.name} claim {i} {key}", "eval")
                fns[key] = functools.partial(eval, code, ns)
        out.append(Claim(row["seed"], row["where"], row["quote"], row["gloss"],
                         row.get("claimed"), row["unit"], row.get("kind", "estimate"),
                         call=row.get("predict", ""), reason=row.get("reason", ""),
                         id=cid, **fns))  # fmt: skip
    return out


def fmt(v: object) -> str:
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    x = float(v)  # type: ignore[arg-type]
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 0.01 or a == 0:
        return f"{x:.3g}"
    return f"{x:.2e}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _with_detail(p: Pred | None) -> str:
    if p is None:
        return "–"
    return fmt(p.value) + (f" ({p.detail})" if p.detail else "")


def rows(claims: list[Claim]) -> list[tuple[str, Claim, Pred | None, Pred | None, Verdict]]:
    out = []
    for c in claims:
        pred, meas, verdict = evaluate(c)
        out.append((c.id, c, pred, meas, verdict))
    return out


def markdown(claims: list[Claim]) -> str:
    """One table per seed, then the exact call behind each gpuperf number."""
    lines: list[str] = []
    table = rows(claims)
    for seed in sorted({c.seed for c in claims}):
        mine = [r for r in table if r[1].seed == seed]
        held = sum(r[4].status == "holds" for r in mine)
        off = sum(r[4].status == "off" for r in mine)
        lines += [
            f"### {TITLES.get(seed, seed)}",
            "",
            f"{len(mine)} claims: {held} hold, {off} off, {len(mine) - held - off} not checkable.",
            "",
            "| id | where | seed says | meaning | unit | seed | gpuperf | measured | verdict "
            "| why |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for cid, c, pred, meas, v in mine:
            why = c.reason if v.status != "holds" else ""
            if v.status == "holds" and c.reason.startswith("("):
                why = c.reason
            verdict = v.text() + (" vs measured" if v.against == "measured" else "")
            cells = [
                cid,
                c.where,
                c.quote,
                c.gloss,
                c.unit,
                fmt(c.claimed),
                _with_detail(pred),
                _with_detail(meas),
                f"**{verdict}**",
                why,
            ]
            lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
        lines += ["", "<details><summary>API calls</summary>", ""]
        for cid, c, *_ in mine:
            if c.call:
                lines.append(f"- {cid}: `{c.call}`")
        lines += ["", "</details>", ""]
    return "\n".join(lines)


def write_doc(text: str, path: Path = DOC) -> None:
    doc = path.read_text(encoding="utf-8")
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{path}: markers {BEGIN!r} / {END!r} not found")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    from gpuperf.fileio import write_text

    write_text(path, f"{head}{BEGIN}\n\n{text}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seed", help="only this seed (000..004)")
    ap.add_argument("--write", action="store_true", help=f"rewrite the tables in {DOC.name}")
    args = ap.parse_args(argv)
    claims = [c for c in all_claims() if args.seed in (None, c.seed)]
    if not claims:
        raise SystemExit(f"no claims for seed {args.seed!r}")
    text = markdown(claims)
    if args.write:
        write_doc(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
