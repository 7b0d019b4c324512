"""Plan-search speed: plans evaluated per second by `gpuperf search` (target >= 10,000 plans/s).

Prints two rates: cold (a fresh Evaluator: the first plan of each (tp, micro-batch) pays the
per-layer op models) and warm (the same search again on the same Evaluator, pure plan arithmetic).

    .venv/bin/python benchmarks/search_speed.py
"""

from __future__ import annotations

import time

from gpuperf.hardware.loader import load_system
from gpuperf.perfmodel.parallel import validate
from gpuperf.perfmodel.parallel_cost import Evaluator
from gpuperf.perfmodel.search import enumerate_plans, search
from gpuperf.workloads.config import load_model

CASES = [
    ("llama2-70b", "dgx-h100", 64, 1024, 4096),
    ("mixtral-8x7b", "dgx-h100", 64, 512, 4096),
    ("llama3-8b", "dgx-h200", 16, 256, 8192),
]


def main() -> None:
    for model, system, gpus, gbs, seq in CASES:
        cfg, spec = load_model(model), load_system(system)
        res = search(cfg, spec, gpus, global_batch=gbs, seq=seq)
        nodes = max(1, gpus // spec.gpus_per_node)
        plans = []
        for p in enumerate_plans(cfg, spec, gpus, global_batch=gbs, seq=seq):
            try:
                validate(cfg, p, spec, nodes)
                plans.append(p)
            except Exception:
                continue
        ev = Evaluator(cfg, spec)
        for p in plans:  # cold pass fills the caches
            ev.evaluate(p, nodes)
        start = time.perf_counter()
        for p in plans:
            ev.evaluate(p, nodes)
        warm = len(plans) / (time.perf_counter() - start)
        print(
            f"{model:14s} {gpus:4d} GPUs of {system}: {res.evaluated:6d} plans, "
            f"cold {res.plans_per_s:9,.0f} plans/s, warm {warm:9,.0f} plans/s; "
            f"best {res.ranked[0].plan.label()}"
        )


if __name__ == "__main__":
    main()
