"""Write a calibrated [model] table into a shipped GPU profile.

    python benchmarks/apply_calibration.py PROFILE.toml CALIBRATED.toml

CALIBRATED.toml is what `gpuperf calibrate --from benchmarks/results/<gpu> --gpu <gpu> -o ...`
wrote. The profile's [model] table is replaced by the fitted values (its leading comment lines,
which say where fixed facts come from, are kept); every other line of the profile is untouched.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def main() -> int:
    profile, calibrated = map(Path, sys.argv[1:3])
    text = profile.read_text()
    cal = calibrated.read_text()
    source = cal.splitlines()[0].lstrip("# ").strip()
    fitted = cal[cal.index("[model]") + len("[model]") :].strip().splitlines()
    head, sep, tail = text.partition("[model]")
    keep: list[str] = []
    facts: dict[str, str] = {}
    for line in tail.strip().splitlines():
        if line.startswith("# The rest:"):
            continue  # the previous calibration's note
        if line.startswith("#"):
            keep.append(line)
        elif "=" in line and "calibrated" not in line:  # a fixed fact, kept as it is
            facts[line.split("=")[0].strip()] = line
    lines = [*keep, f"# The rest: {source} (gpuperf calibrate, calibration split only)."]
    for line in fitted:
        key = line.split("=")[0].strip()
        lines.append(facts.pop(key, f"{line}  # source: calibrated, see above"))
    lines += facts.values()
    new = head.rstrip() + "\n\n[model]\n" + "\n".join(lines) + "\n"
    profile.write_text(re.sub(r"\n{3,}", "\n\n", new))
    print(f"updated {profile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
