"""`gpuperf hw`: list, show and detect hardware profiles. Parses, calls the loader, renders."""

from __future__ import annotations

import csv
import dataclasses
import difflib
import json
import sys
from typing import Any

import click

from gpuperf.cli.common import output_options
from gpuperf.dtypes import DTYPES
from gpuperf.errors import InputError
from gpuperf.hardware import loader
from gpuperf.hardware.spec import GpuSpec, ModelParams, SystemSpec

Row = dict[str, Any]


@click.group()
def hw() -> None:
    """GPU and system profiles: the numbers every prediction uses, with their sources.

    \b
    Examples:
      gpuperf hw list
      gpuperf hw show h100
      gpuperf hw show dgx-h100 --format json
      gpuperf hw show ./my-h100.toml      # a profile of your own (base = "h100" inherits)
      gpuperf hw detect
    """


@hw.command("list")
@output_options
def list_cmd(fmt: str) -> None:
    """List the built-in GPU and system profiles (dense peaks, HBM, ridge points, calibrated?).

    A GPU is "calibrated" when its profile carries time-model parameters fitted to measurements
    of that GPU (a [model] table); the others are datasheet numbers run on gpuperf's default
    parameters, so their predictions are less certain.

    \b
    Examples:
      gpuperf hw list
      gpuperf hw list --format csv > gpus.csv
    """
    gpus = [_gpu_row(loader.load_gpu(n)) for n in loader.gpu_names()]
    systems = [_system_row(loader.load_system(n)) for n in loader.system_names()]
    if fmt == "json":
        _print_json({"gpus": gpus, "systems": systems})
    elif fmt == "csv":
        rows = [{"kind": "gpu", **r} for r in gpus] + [{"kind": "system", **r} for r in systems]
        _print_csv(rows)
    else:
        _print_table("GPUs (peaks dense, no sparsity)", gpus, _GPU_COLUMNS)
        _print_note(_CALIBRATED_NOTE)
        title = "Systems (per node; NVLink GB/s per GPU, NIC GB/s per NIC; per direction)"
        _print_table(title, systems, _SYSTEM_COLUMNS)
        pairs = sorted(loader.aliases().items(), key=lambda kv: (kv[1], kv[0]))
        _print_note("aliases: " + ", ".join(f"{a} → {n}" for a, n in pairs))


@hw.command("show")
@click.argument("name")
@output_options
def show_cmd(name: str, fmt: str) -> None:
    """Every field of one GPU or system profile, with units, ridge points and sources.

    NAME is a profile name, an alias, or a path to a .toml file.

    \b
    Examples:
      gpuperf hw show h100
      gpuperf hw show a100-sxm4-40gb --format json
      gpuperf hw show dgx-h100
      gpuperf hw show ./calibrated-h100.toml
    """
    if loader.is_system(name):
        spec: GpuSpec | SystemSpec = loader.load_system(name)
        rows = _system_fields(spec)
    else:
        try:
            spec = loader.load_gpu(name)
        except InputError as exc:  # neither: name the systems too, which show also takes
            if not str(exc).startswith("unknown gpu"):
                raise
            gpus, systems = loader.gpu_names(), loader.system_names()
            names = [*gpus, *systems, *loader.aliases()]
            close = difflib.get_close_matches(name.strip().lower(), names, n=3)
            known = (f"did you mean {', '.join(close)}?" if close else
                     f"GPUs: {', '.join(gpus)}; systems: {', '.join(systems)}")  # fmt: skip
            raise InputError(f"unknown profile {name!r}; {known} (see `gpuperf hw list`, or "
                             "pass a path to a .toml file)") from None  # fmt: skip
        rows = _gpu_fields(spec)
    if fmt == "json":
        obj: Row = {"kind": "system" if isinstance(spec, SystemSpec) else "gpu"}
        obj |= {"name": spec.name, "spec": _jsonable(dataclasses.asdict(spec)), "fields": rows}
        if isinstance(spec, GpuSpec):
            obj["ridge_flop_per_byte"] = {dt: spec.ridge(dt) for dt in spec.peak_flops}
        _print_json(obj)
    elif fmt == "csv":
        _print_csv(rows)
    else:
        _print_table(f"{spec.display_name} ({spec.name})", _dedupe_sources(rows), _FIELD_COLUMNS)


@hw.command("detect")
@click.option("--index", default=0, show_default=True, help="Which GPU (NVML index).")
@output_options
def detect_cmd(index: int, fmt: str) -> None:
    """Detect this machine's GPU with NVML and name the matching profile.

    Exits with code 3 when there is no NVIDIA GPU or no profile for it.

    \b
    Examples:
      gpuperf hw detect
      gpuperf hw detect --index 1 --format json
    """
    from gpuperf.hardware.detect import detect_gpu, gpu_environment

    gpu = detect_gpu(index, hint="`gpuperf hw list` shows the profiles --gpu can name")
    env = gpu_environment(index)
    if fmt == "json":
        _print_json({"profile": gpu.name, "display_name": gpu.display_name, "environment": env})
        return
    rows = [{"field": "profile", "value": gpu.name, "unit": ""}]
    rows += [{"field": k, "value": v, "unit": _env_unit(k)} for k, v in env.items()]
    if fmt == "csv":
        _print_csv(rows)
    else:
        _print_table(f"Detected: {gpu.display_name}", rows, _FIELD_COLUMNS[:3])


# ----------------------------------------------------------------------------- rows

_GPU_COLUMNS = [
    ("name", "GPU"),
    ("sms", "SMs"),
    ("bf16_tflops", "BF16 TFLOP/s"),
    ("fp8_tflops", "FP8 TFLOP/s"),
    ("hbm_gib", "HBM GiB"),
    ("hbm_tbps", "HBM TB/s"),
    ("bf16_ridge_flop_per_byte", "BF16 ridge FLOP/B"),
    ("calibrated", "cal."),
]
# "cal." keeps the GPU table within 80 columns; the note under the table spells it out.
_CALIBRATED_NOTE = (
    "cal. = calibrated: yes = time-model parameters fitted to measurements of that GPU "
    "([model] table); no = not calibrated: datasheet numbers run on gpuperf's default parameters"
)
_SYSTEM_COLUMNS = [
    ("name", "system"),
    ("gpu", "GPU"),
    ("gpus_per_node", "GPUs"),
    ("nvswitch", "NVSwitch"),
    ("nvlink_gbps_per_direction", "NVLink GB/s"),
    ("nics_per_node", "NICs"),
    ("nic_gbps_per_direction", "NIC GB/s"),
]
_FIELD_COLUMNS = [("field", "field"), ("value", "value"), ("unit", "unit"), ("source", "source")]


def _aliases_of(name: str) -> str:
    return ", ".join(sorted(a for a, target in loader.aliases().items() if target == name))


def _gpu_row(gpu: GpuSpec) -> Row:
    return {
        "name": gpu.name,
        "aliases": _aliases_of(gpu.name),
        "sms": gpu.sms,
        "bf16_tflops": _tflops(gpu, "bf16"),
        "fp8_tflops": _tflops(gpu, "fp8"),
        "hbm_gib": _round(gpu.hbm_bytes / 2**30),
        "hbm_tbps": _round(gpu.hbm_bw / 1e12, 3),
        "bf16_ridge_flop_per_byte": _round(gpu.ridge("bf16"), 1)
        if "bf16" in gpu.peak_flops
        else None,
        "calibrated": gpu.calibrated,
    }


def _system_row(system: SystemSpec) -> Row:
    return {
        "name": system.name,
        "aliases": _aliases_of(system.name),
        "gpu": system.gpu.name,
        "gpus_per_node": system.gpus_per_node,
        "nvswitch": system.nvswitch,
        "nvlink_gbps_per_direction": _round(system.nvlink_bw / 1e9),
        "nics_per_node": system.nics_per_node,
        "nic_gbps_per_direction": _round(system.nic_bw / 1e9),
    }


def _tflops(gpu: GpuSpec, dtype: str) -> float | None:
    return _round(gpu.peak_flops[dtype] / 1e12) if dtype in gpu.peak_flops else None


def _field(field: str, value: Any, unit: str, source: str = "") -> Row:
    return {"field": field, "value": value, "unit": unit, "source": source}


def _gpu_fields(gpu: GpuSpec) -> list[Row]:
    src = gpu.sources.get
    rows = [
        _field("display_name", gpu.display_name, ""),
        _field("name", gpu.name, ""),
        _field("aliases", _aliases_of(gpu.name), ""),
        _field("nvml_names", "; ".join(loader.gpu_nvml_names().get(gpu.name, ())), ""),
        _field("arch", gpu.arch, "", src("arch", "")),
        _field("compute_capability", gpu.compute_capability, "", src("compute_capability", "")),
        _field("sms", gpu.sms, "SMs", src("sms", "")),
        _field("boost_clock", _round(gpu.boost_clock_mhz), "MHz", src("boost_clock_mhz", "")),
        _field("hbm_capacity", _round(gpu.hbm_bytes / 2**30), "GiB", src("hbm_bytes", "")),
        _field("hbm_bw", _round(gpu.hbm_bw / 1e9), "GB/s", src("hbm_bw", "")),
        _field("l2", _round(gpu.l2_bytes / 2**20), "MiB", src("l2_bytes", "")),
        _field(
            "smem_per_sm",
            _round(gpu.smem_per_sm_bytes / 2**10),
            "KiB",
            src("smem_per_sm_bytes", ""),
        ),
        _field(
            "nvlink_bw", _round(gpu.nvlink_bw / 1e9), "GB/s per direction", src("nvlink_bw", "")
        ),
        _field("pcie_bw", _round(gpu.pcie_bw / 1e9), "GB/s per direction", src("pcie_bw", "")),
    ]
    if gpu.nvlink_gpus:  # a bridge: the NVLink joins this many GPUs (0: every GPU of a node)
        rows.append(_field("nvlink_gpus", gpu.nvlink_gpus, "GPUs an NVLink bridge joins",
                           src("nvlink_gpus", "")))  # fmt: skip
    for dt in DTYPES:
        if dt in gpu.peak_flops:
            rate = "TOP/s" if dt == "int8" else "TFLOP/s"
            rows.append(
                _field(f"peak_{dt}", _tflops(gpu, dt), f"{rate} dense", src(f"peak_flops.{dt}", ""))
            )
        else:
            rows.append(_field(f"peak_{dt}", None, "not supported", ""))
    for dt in DTYPES:
        if dt in gpu.peak_flops:
            rows.append(_field(f"ridge_{dt}", _round(gpu.ridge(dt), 1), "FLOP/B", "peak / hbm_bw"))
    rows.append(_field("calibrated", gpu.calibrated, "", _calibrated_source(gpu)))
    defaults = ModelParams()
    for f in dataclasses.fields(gpu.params):
        value = getattr(gpu.params, f.name)
        default = (
            "gpuperf default (uncalibrated)"
            if value == getattr(defaults, f.name)
            else f"{gpu.params_from}'s calibration (params_from; not measured on this GPU)"
            if gpu.params_from
            else "set in the profile's [model] table (its comments say how)"
        )
        if f.name == "extra":
            for key, extra in value.items():
                rows.append(
                    _field(
                        f"model.extra.{key}",
                        extra,
                        "",
                        src(f"params.extra.{key}", "set in the profile's [model.extra] table"),
                    )
                )
        elif f.name.endswith("_s"):
            rows.append(
                _field(
                    f"model.{f.name}",
                    _round(value * 1e6, 3),
                    "µs",
                    src(f"params.{f.name}", default),
                )
            )
        else:
            rows.append(
                _field(f"model.{f.name}", value, "fraction", src(f"params.{f.name}", default))
            )
    rows.append(_field("path", gpu.path, ""))
    return rows


def _calibrated_source(gpu: GpuSpec) -> str:
    if gpu.calibrated:
        return "the profile (or its base) sets time-model parameters in a [model] table"
    if gpu.params_from:
        return (f"not measured: datasheet numbers with {gpu.params_from}'s calibrated "
                "parameters (params_from)")  # fmt: skip
    return "no [model] table: datasheet numbers with gpuperf's default parameters"


def _system_fields(system: SystemSpec) -> list[Row]:
    src = system.sources.get
    return [
        _field("display_name", system.display_name, ""),
        _field("name", system.name, ""),
        _field("aliases", _aliases_of(system.name), ""),
        _field("gpu", system.gpu.name, "", src("gpu", system.gpu.display_name)),
        _field("gpus_per_node", system.gpus_per_node, "GPUs", src("gpus_per_node", "")),
        _field("nvswitch", system.nvswitch, "", src("nvswitch", "")),
        _field(
            "nvlink_bw",
            _round(system.nvlink_bw / 1e9),
            "GB/s per GPU per direction",
            src("nvlink_bw", ""),
        ),
        _field("nics_per_node", system.nics_per_node, "NICs", src("nics_per_node", "")),
        _field(
            "nic_bw", _round(system.nic_bw / 1e9), "GB/s per NIC per direction", src("nic_bw", "")
        ),
        _field(
            "nic_speed",
            _round(system.nic_bw * 8 / 1e9),
            "Gb/s per NIC per direction",
            src("nic_bw", ""),
        ),
        _field(
            "node_hbm",
            _round(system.gpus_per_node * system.gpu.hbm_bytes / 2**30),
            "GiB",
            "gpus_per_node x gpu hbm",
        ),
        _field("path", system.path, ""),
    ]


def _dedupe_sources(rows: list[Row]) -> list[Row]:
    """For people: a source repeated on consecutive rows is printed once."""
    out, previous = [], None
    for row in rows:
        same = row["source"] and row["source"] == previous
        previous = row["source"] or previous
        out.append({**row, "source": "(as above)"} if same else row)
    return out


def _env_unit(key: str) -> str:
    if key.endswith("_mhz"):
        return "MHz"
    return "bytes" if key.endswith("_bytes") else ""


# ----------------------------------------------------------------------------- output


def _round(value: float, digits: int = 2) -> float | int:
    rounded = round(float(value), digits)
    return int(rounded) if rounded == int(rounded) else rounded


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return obj


def _print_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, ensure_ascii=False))


def _print_csv(rows: list[Row]) -> None:
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    writer = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)


def _print_table(title: str, rows: list[Row], columns: list[tuple[str, str]]) -> None:
    from rich.table import Table

    from gpuperf.reports.console import console as make_console

    table = Table(title=title, title_justify="left")
    for i, (key, header) in enumerate(columns):
        first = rows[0].get(key) if rows else None
        numeric = isinstance(first, int | float) and not isinstance(first, bool)
        justify = "right" if numeric else "left"
        widest_word = max(len(word) for word in header.split())
        table.add_column(
            header, justify=justify, overflow="fold", no_wrap=i == 0, min_width=widest_word
        )
    for row in rows:
        table.add_row(*(_cell(row.get(k)) for k, _ in columns))
    make_console().print(table)


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _print_note(text: str) -> None:
    from gpuperf.reports.console import console as make_console

    make_console().print(text, style="dim")
