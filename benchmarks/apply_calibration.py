"""Write a calibrated [model] table into a shipped GPU profile.

    python benchmarks/apply_calibration.py PROFILE.toml CALIBRATED.toml

CALIBRATED.toml is what `gpuperf calibrate --from benchmarks/results/<gpu> --gpu <gpu> -o ...`
wrote. The profile's [model] tables are replaced by the fitted values; lines of the old [model]
table that are fixed facts (comment lines, and values whose comment does not say "calibrated")
are kept; every line before [model] is untouched.
"""

from __future__ import annotations

import sys
from pathlib import Path

NOTE = "# The rest: "


def main() -> int:
    profile, calibrated = map(Path, sys.argv[1:3])
    head, _, tail = profile.read_text().partition("\n[model]")
    cal = calibrated.read_text()
    source = cal.splitlines()[0].lstrip("# ").strip()
    comments, facts = [], []
    for line in tail.splitlines():
        if line.startswith("[model"):
            break  # [model.extra] and anything after it are the old calibration's
        if line.startswith("#") and not line.startswith(NOTE):
            comments.append(line)
        elif "=" in line and "calibrated" not in line:
            facts.append(line)
    fact_keys = {f.split("=")[0].strip() for f in facts}
    out = [*comments, f"{NOTE}{source} (gpuperf calibrate, calibration split only).", *facts]
    for line in cal[cal.index("[model]") + len("[model]") :].strip().splitlines():
        key = line.split("=")[0].strip()
        if "=" in line and key not in fact_keys:
            out.append(f"{line}  # source: calibrated, see above")
        elif "=" not in line:
            out.append(line)
    profile.write_text(head.rstrip() + "\n\n[model]\n" + "\n".join(out) + "\n")
    print(f"updated {profile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
