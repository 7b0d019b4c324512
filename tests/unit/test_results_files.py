"""Every committed results file is a JSON object that the folder scanners can read."""

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_results_files_are_objects_with_known_content():
    files = sorted(RESULTS.glob("*/*.json"))
    assert len(files) >= 20
    for f in files:
        data = json.loads(f.read_text())
        assert isinstance(data, dict), f
        assert data.keys() & {"rows", "runs", "env", "gemm", "gpu", "static"}, f
