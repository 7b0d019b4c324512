"""Load GPU and system profiles (TOML, human units) into GpuSpec / SystemSpec (SI units).

A profile is a built-in name (`h100-sxm5-80gb`), an alias (`h100`), case-insensitive, or a path to
a user's .toml. A user file may start from a built-in with `base = "h100"` and override a few fields
(tables such as [peak_tflops], [model] and [sources] merge key by key). Every problem is one
InputError line that names the file and the field.

GPU file keys (units in the names): sms, boost_clock_mhz, hbm_gib, hbm_bw_gbps (GB/s = 1e9 B/s),
l2_mib, smem_per_sm_kib, nvlink_gbps_per_direction, pcie_gbps_per_direction, [peak_tflops] (dense,
keys fp64 fp32 tf32 bf16 fp16 fp8 int8; omit what the GPU lacks), display_name, arch,
compute_capability, aliases, nvml_names, [sources], optional [model] (ModelParams fields).
System file keys: gpu, gpus_per_node, nvswitch, nvlink_gbps_per_direction, nics_per_node,
nic_gbit_s (Gb/s, bits), display_name, aliases, [sources].
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import sys
from pathlib import Path
from typing import Any

from gpuperf.dtypes import DTYPES
from gpuperf.errors import InputError, shown
from gpuperf.hardware.spec import ARCHS, GpuSpec, ModelParams, SystemSpec
from gpuperf.units import MAX_VALUE

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROFILES_DIR = Path(__file__).parent / "profiles"
SYSTEMS_DIR = PROFILES_DIR / "systems"

# TOML key -> (GpuSpec field, factor to SI, integer?, may be zero?)
GPU_NUMBERS: dict[str, tuple[str, float, bool, bool]] = {
    "sms": ("sms", 1, True, False),
    "boost_clock_mhz": ("boost_clock_mhz", 1, False, False),
    "hbm_gib": ("hbm_bytes", 2**30, False, False),
    "hbm_bw_gbps": ("hbm_bw", 1e9, False, False),
    "l2_mib": ("l2_bytes", 2**20, False, False),
    "smem_per_sm_kib": ("smem_per_sm_bytes", 2**10, False, False),
    "nvlink_gbps_per_direction": ("nvlink_bw", 1e9, False, True),
    "pcie_gbps_per_direction": ("pcie_bw", 1e9, False, False),
    "nvlink_gpus": ("nvlink_gpus", 1, True, True),
}
SYSTEM_NUMBERS: dict[str, tuple[str, float, bool, bool]] = {
    "gpus_per_node": ("gpus_per_node", 1, True, False),
    "nvlink_gbps_per_direction": ("nvlink_bw", 1e9, False, True),
    "nics_per_node": ("nics_per_node", 1, True, True),
    "nic_gbit_s": ("nic_bw", 1e9 / 8, False, True),  # bits -> bytes
}
_GPU_REQUIRED_STR = ("arch", "compute_capability")
_COMMON_KEYS = ("name", "base", "display_name", "aliases", "sources")
_GPU_KEYS = (*_COMMON_KEYS, *GPU_NUMBERS, *_GPU_REQUIRED_STR, "nvml_names", "peak_tflops", "model",
             "params_from")  # fmt: skip
MIN_VALUE = 1e-6  # the smallest positive size a profile's key takes, in its own unit (GB/s...)
MAX_GPUS_PER_NODE = 576  # NVL576, the largest NVLink domain announced (GB200 NVL72 ships)
_SYSTEM_KEYS = (*_COMMON_KEYS, *SYSTEM_NUMBERS, "gpu", "nvswitch")
# params_from stays with its profile: a profile built on one (a calibration of that GPU, say)
# starts from gpuperf's defaults and its own [model] table
_NOT_INHERITED = ("name", "base", "aliases", "nvml_names", "params_from")
_PLAIN_SOURCES = ("gpu", "nvswitch", "display_name", "arch", "compute_capability")
_MODEL_FIELDS = {f.name for f in dataclasses.fields(ModelParams)} - {"extra"}


# ----------------------------------------------------------------------------- public API


def load_gpu(spec: str) -> GpuSpec:
    """GpuSpec for a profile name, alias (case-insensitive), path to a .toml, or "auto" (detect)."""
    text = str(spec).strip()
    if text.lower() == "auto":
        from gpuperf.hardware.detect import detect_gpu

        return detect_gpu()
    if _is_path(text):
        return _gpu_from_raw(*_read_with_base(Path(text), "gpu"))
    return _builtin_gpu(_resolve(text, "gpu"))


def load_system(spec: str) -> SystemSpec:
    """SystemSpec for a system name, alias (case-insensitive) or path to a .toml."""
    text = str(spec).strip()
    if _is_path(text):
        return _system_from_raw(*_read_with_base(Path(text), "system"))
    return _builtin_system(_resolve(text, "system"))


def gpu_names() -> list[str]:
    """Canonical names of the built-in GPU profiles, sorted."""
    return sorted(_builtin_files("gpu"))


def system_names() -> list[str]:
    """Canonical names of the built-in system profiles, sorted."""
    return sorted(_builtin_files("system"))


def aliases() -> dict[str, str]:
    """Alias -> canonical name, for GPUs and systems (e.g. "h100" -> "h100-sxm5-80gb")."""
    return {**_alias_table("gpu"), **_alias_table("system")}


def gpu_nvml_names() -> dict[str, tuple[str, ...]]:
    """Canonical GPU name -> the device names NVML reports for it (used by detect)."""
    return {n: tuple(_builtin_raw("gpu", n).get("nvml_names", ())) for n in gpu_names()}


def is_system(spec: str) -> bool:
    """True when `spec` names a system: a system name or alias, or a .toml with `gpu =` or a
    system `base`."""
    text = str(spec).strip()
    systems = {*_builtin_files("system"), *_alias_table("system")}
    if not _is_path(text):
        return _norm(text) in systems
    try:
        raw = _read_toml(Path(text))
    except InputError:
        return False  # load_gpu reports the problem
    base = raw.get("base")
    return "gpu" in raw or (isinstance(base, str) and not _is_path(base) and _norm(base) in systems)


# ----------------------------------------------------------------------------- names and files


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _is_path(text: str) -> bool:
    return text.lower().endswith(".toml") or "/" in text or "\\" in text


@functools.cache
def _builtin_files(kind: str) -> dict[str, Path]:
    folder = PROFILES_DIR if kind == "gpu" else SYSTEMS_DIR
    return {p.stem: p for p in folder.glob("*.toml")}


@functools.cache
def _builtin_raw(kind: str, name: str) -> dict[str, Any]:
    return _read_toml(_builtin_files(kind)[name])


@functools.cache
def _alias_table(kind: str) -> dict[str, str]:
    table: dict[str, str] = {}
    for name in _builtin_files(kind):
        for alias in _builtin_raw(kind, name).get("aliases", []):
            table[_norm(alias)] = name
    return table


def _resolve(text: str, kind: str) -> str:
    """Canonical built-in name for a name or alias, or InputError with close names."""
    key = _norm(text)
    if key in _builtin_files(kind):
        return key
    if key in _alias_table(kind):
        return _alias_table(kind)[key]
    other = "system" if kind == "gpu" else "gpu"
    if key in _builtin_files(other) or key in _alias_table(other):
        raise InputError(f"{text!r} is a {other} profile, not a {kind} profile")
    known = sorted({*_builtin_files(kind), *_alias_table(kind)})
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    close += [k for k in known if key and key in k and k not in close][: 3 - len(close)]
    hint = (
        f"did you mean {', '.join(close)}?"
        if close
        else f"known: {', '.join(sorted(_builtin_files(kind)))}"
    )
    raise InputError(
        f"unknown {kind} {text!r}; {hint} (see `gpuperf hw list`, or pass a path to a .toml file)"
    )


def _read_toml(path: Path) -> dict[str, Any]:
    from gpuperf.fileio import read_text

    try:
        return tomllib.loads(read_text(path, "hardware file"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: malformed TOML: {exc}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply") from None


def _read_with_base(path: Path, kind: str, seen: tuple[str, ...] = ()) -> tuple[dict, str, str]:
    """(raw dict with `base` merged in, profile name, origin path) for a user file."""
    from gpuperf.fileio import printable

    raw = _read_toml(path)
    origin = str(path)
    name = raw.get("name", path.stem)
    if not isinstance(name, str) or not printable(name).strip():
        raise InputError(f"{origin}: name must be a non-empty string, got {name!r}")
    name = printable(name).strip()
    base = raw.get("base")
    if base is None:
        return raw, name, origin
    if not isinstance(base, str):
        raise InputError(f"{origin}: base must be a string (a profile name or path), got {base!r}")
    if _is_path(base):
        base_path = Path(base) if Path(base).is_absolute() else path.parent / base
        if str(base_path.resolve()) in seen:
            raise InputError(f"{origin}: base {base!r} refers back to itself")
        base_raw, _, _ = _read_with_base(base_path, kind, (*seen, str(path.resolve())))
    else:
        base_raw = _builtin_raw(kind, _resolve(base, kind))
    return _merge(base_raw, raw, origin), name, origin


def _merge(base: dict, over: dict, origin: str) -> dict:
    """Base fields overridden by `over`; tables merge per key; overrides get a default source."""
    out = {k: v for k, v in base.items() if k not in _NOT_INHERITED}
    sources = dict(_flatten(base.get("sources", {}), origin))
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge_tables(out[key], value)
        else:
            out[key] = value
        if key in _NOT_INHERITED or key == "sources":
            continue
        if isinstance(value, dict):  # one default source per overridden entry: model.gemm_eff
            sources.update({f"{key}.{sub}": f"set in {origin}" for sub in _flatten(value, origin)})
        else:
            sources[key] = f"set in {origin}"
    sources.update(_flatten(over.get("sources", {}), origin))
    out["sources"] = sources
    return out


def _merge_tables(base: dict, over: dict) -> dict:
    """`over` on `base`, key by key at every depth: a calibrated profile's [model.extra] adds to
    its base's (issue costs, fp8 and grouped-GEMM efficiencies) instead of replacing them."""
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merge_tables(out[key], value) if both else value
    return out


def _flatten(table: Any, origin: str, prefix: str = "") -> dict[str, Any]:
    if not isinstance(table, dict):
        raise InputError(f'{origin}: [sources] must be a table of field = "text"')
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, origin, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


# ----------------------------------------------------------------------------- validation


def _check_keys(raw: dict, allowed: tuple[str, ...], origin: str, where: str = "") -> None:
    for key in raw:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f" (allowed: {', '.join(allowed)})"
            raise InputError(f"{origin}: unknown key {where}{key!r}{hint}")


def _require(raw: dict, keys: tuple[str, ...], origin: str) -> None:
    missing = [k for k in keys if k not in raw]
    if missing:
        raise InputError(f"{origin}: missing required field(s): {', '.join(missing)}")


def _number(value: Any, what: str, origin: str, *, integer: bool = False, zero: bool = False):
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{origin}: {what} must be a number, got {shown(value)}")
    if integer and not isinstance(value, int):
        raise InputError(f"{origin}: {what} must be a whole number, got {shown(value)}")
    # not in range: NaN, ±inf and 400-digit integers too
    if not 0 <= value <= MAX_VALUE or (value == 0 and not zero):
        bound = "zero or positive" if zero else "positive"
        raise InputError(f"{origin}: {what} must be {bound} (at most 2^62), got {shown(value)}")
    return value


def _string(raw: dict, key: str, origin: str, default: str | None = None) -> str:
    from gpuperf.fileio import printable

    value = raw.get(key, default)
    if not isinstance(value, str) or not printable(value).strip():
        raise InputError(f"{origin}: {key} must be a non-empty string, got {value!r}")
    return printable(value).strip()


def _string_list(raw: dict, key: str, origin: str) -> None:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InputError(f"{origin}: {key} must be a list of strings, got {value!r}")


def _numbers(raw: dict, table: dict, origin: str) -> dict[str, Any]:
    """{spec field: SI value} for the numeric keys present in raw."""
    out: dict[str, Any] = {}
    for key, (field_name, factor, integer, zero) in table.items():
        if key in raw:
            value = _number(raw[key], key, origin, integer=integer, zero=zero)
            if 0 < value < MIN_VALUE:  # a millionth of the key's unit: a typo; 1/it overflows
                raise InputError(f"{origin}: {key} must be at least {MIN_VALUE:g}"
                                 f"{' (or 0)' if zero else ''}, got {shown(value)}")  # fmt: skip
            out[field_name] = value if integer else float(value) * factor
    return out


def _peaks(raw: dict, origin: str) -> dict:
    table = raw["peak_tflops"]
    if not isinstance(table, dict) or not table:
        raise InputError(f"{origin}: [peak_tflops] must be a non-empty table of dtype = TFLOP/s")
    _check_keys(table, DTYPES, origin, "peak_tflops.")
    out = {}
    for dt in (d for d in DTYPES if d in table):
        value = _number(table[dt], f"peak_tflops.{dt}", origin)
        if value < MIN_VALUE:  # a millionth of a TFLOP/s: a typo; 1/it overflows
            raise InputError(f"{origin}: peak_tflops.{dt} must be at least {MIN_VALUE:g} "
                             f"TFLOP/s, got {shown(value)}")  # fmt: skip
        out[dt] = value * 1e12
    return out


# [model] fields that are fractions (at most 1); the first set divides, so it cannot be 0 either.
_POSITIVE_FRACTIONS = frozenset({"sustained_clock_frac", "bw_sm_frac"})
_FRACTIONS = _POSITIVE_FRACTIONS | {"l2_usable_frac", "gemm_tail_frac", "attn_exp_overlap",
                                    "fp32_matmul_tf32"}  # fmt: skip


def _model(raw: dict, origin: str, start: ModelParams | None = None) -> ModelParams:
    """The [model] table over `start` (gpuperf's defaults when None)."""
    table = raw.get("model", {})
    if not isinstance(table, dict):
        raise InputError(f"{origin}: [model] must be a table of ModelParams fields")
    _check_keys(table, (*sorted(_MODEL_FIELDS), "extra"), origin, "model.")
    values: dict[str, Any] = {}
    for key in _MODEL_FIELDS & table.keys():
        # Efficiencies must be positive; counts, flags and overlaps may be zero.
        zero = not key.endswith("_eff") and key not in _POSITIVE_FRACTIONS
        values[key] = float(_number(table[key], f"model.{key}", origin, zero=zero))
        if (key.endswith("_eff") or key in _FRACTIONS) and values[key] > 1:
            low = "0 <= x" if zero else "0 < x"
            raise InputError(
                f"{origin}: model.{key} is a fraction ({low} <= 1), got {shown(table[key])}"
            )
    extra = table.get("extra", {})
    if not isinstance(extra, dict):
        raise InputError(f"{origin}: [model.extra] must be a table of name = number")
    for key, value in extra.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (-MAX_VALUE <= value <= MAX_VALUE)
        ):
            raise InputError(
                f"{origin}: model.extra.{key} must be a number (finite, at most 2^62), "
                f"got {shown(value)}"
            )
        _check_extra(key, float(value), origin)
    own = {k: float(v) for k, v in extra.items()}
    if start is not None:
        return dataclasses.replace(start, **values, extra={**start.extra, **own})
    return ModelParams(**values, extra=own)


def _prior(raw: dict, name: str, origin: str) -> GpuSpec | None:
    """The calibrated built-in profile whose time-model parameters this one starts from
    (`params_from`: a GPU not measured here borrowing a close one's fitted efficiencies)."""
    other = raw.get("params_from")
    if other is None:
        return None
    if not isinstance(other, str):
        raise InputError(f"{origin}: params_from must be a built-in GPU profile name")
    prior = _builtin_gpu(_resolve(other, "gpu"))
    if prior.name == name or prior.params_from or not prior.calibrated:
        raise InputError(f"{origin}: params_from must name a calibrated built-in GPU profile "
                         f"(not one that borrows its own), got {other!r}")  # fmt: skip
    return prior


# [model.extra] rates whose 0 turns their term off instead of dividing by it
_ZERO_MEANS_OFF = frozenset({"comm_channel_copy_bw"})  # comm.ring_copy_tail_us
# ... and efficiencies that are ratios to a model, not shares (measured / NCCL-modelled busbw)
_RATIOS = frozenset({"comm_bw_eff"})


def _check_extra(key: str, value: float, origin: str) -> None:
    """[model.extra] holds the time model's named constants, every one a non-negative time,
    rate, cost or share: rates and efficiencies (names ending bw, _eff) are above 0 (a kernel
    divides by them; but _ZERO_MEANS_OFF), efficiencies and overlaps (_eff, _overlap) at most
    1 (but _RATIOS)."""
    positive = key.endswith(("bw", "_eff")) and key not in _ZERO_MEANS_OFF
    if value < 0 or (positive and value == 0):
        need = "above 0" if positive else "0 or more"
        raise InputError(f"{origin}: model.extra.{key} must be {need}, got {value:g}")
    if key.endswith(("_eff", "_overlap")) and key not in _RATIOS and value > 1:
        raise InputError(f"{origin}: model.extra.{key} is a fraction (at most 1), got {value:g}")


def _spec_sources(raw: dict, origin: str, numbers: dict, peaks: tuple[str, ...] = ()) -> dict:
    """[sources] with TOML keys renamed to spec fields: hbm_gib -> hbm_bytes, peak_tflops.bf16 ->
    peak_flops.bf16 (a plain `peak_tflops` entry covers every dtype), model.x -> params.x."""
    flat = _flatten(raw.get("sources", {}), origin)
    out: dict[str, str] = {}
    for key, text in flat.items():
        if not isinstance(text, str):
            raise InputError(f"{origin}: sources.{key} must be a string, got {text!r}")
    general = flat.pop("peak_tflops", None) if peaks else None
    if general is not None:  # one citation for the whole table; per-dtype entries win
        out.update({f"peak_flops.{dt}": general for dt in peaks})
    for key, text in flat.items():
        head, _, tail = key.partition(".")
        if key in numbers:
            out[numbers[key][0]] = text
        elif head == "peak_tflops" and tail in peaks:
            out[f"peak_flops.{tail}"] = text
        elif head == "model":
            out[f"params.{tail}" if tail else "params"] = text
        elif key in _PLAIN_SOURCES:
            out[key] = text
        else:
            raise InputError(f"{origin}: sources.{key} names no field of this profile")
    return out


def _gpu_from_raw(raw: dict, name: str, origin: str) -> GpuSpec:
    _check_keys(raw, _GPU_KEYS, origin)
    required = tuple(k for k in GPU_NUMBERS if k not in ("nvlink_gbps_per_direction",
                                                         "nvlink_gpus"))  # fmt: skip
    joined = raw.get("nvlink_gpus", 0)
    if joined == 1 or (joined and not raw.get("nvlink_gbps_per_direction")):
        raise InputError(f"{origin}: nvlink_gpus is the GPUs an NVLink joins: 0 (every GPU "
                         "of a node) or 2 and more, with nvlink_gbps_per_direction above 0; "
                         f"got {shown(joined)}")  # fmt: skip
    _require(raw, (*_GPU_REQUIRED_STR, *required, "peak_tflops"), origin)
    for key in ("aliases", "nvml_names"):
        _string_list(raw, key, origin)
    cc = _string(raw, "compute_capability", origin)
    major, _, minor = cc.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise InputError(f'{origin}: compute_capability must look like "9.0", got {cc!r}')
    arch = _string(raw, "arch", origin).lower()
    if arch not in ARCHS:
        close = difflib.get_close_matches(arch, ARCHS, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise InputError(f"{origin}: unknown arch {arch!r}; {hint}expected one of: "
                         f"{', '.join(ARCHS)}")  # fmt: skip
    peaks = _peaks(raw, origin)
    prior = _prior(raw, name, origin)
    return GpuSpec(
        name=name,
        display_name=_string(raw, "display_name", origin, default=name),
        arch=arch,
        compute_capability=cc,
        peak_flops=peaks,
        params=_model(raw, origin, prior.params if prior else None),
        sources=_spec_sources(raw, origin, GPU_NUMBERS, tuple(peaks)),
        path=origin,
        params_from=prior.name if prior else "",
        **{"nvlink_bw": 0.0, **_numbers(raw, GPU_NUMBERS, origin)},
    )


def _system_from_raw(raw: dict, name: str, origin: str) -> SystemSpec:
    _check_keys(raw, _SYSTEM_KEYS, origin)
    _require(raw, ("gpu", *SYSTEM_NUMBERS, "nvswitch"), origin)
    _string_list(raw, "aliases", origin)
    if not isinstance(raw["nvswitch"], bool):
        raise InputError(f"{origin}: nvswitch must be true or false, got {raw['nvswitch']!r}")
    gpu_text = _string(raw, "gpu", origin)
    if _is_path(gpu_text) and not Path(gpu_text).is_absolute():
        gpu_text = str(Path(origin).parent / gpu_text)
    numbers = _numbers(raw, SYSTEM_NUMBERS, origin)
    if numbers["nics_per_node"] > 0 and numbers["nic_bw"] == 0:
        raise InputError(f"{origin}: nic_gbit_s must be positive when nics_per_node > 0")
    if numbers["gpus_per_node"] > MAX_GPUS_PER_NODE:
        raise InputError(
            f"{origin}: gpus_per_node {numbers['gpus_per_node']} is more than the largest NVLink "
            f"domain announced ({MAX_GPUS_PER_NODE}, NVL576); describe more GPUs as nodes"
        )
    return SystemSpec(
        name=name,
        display_name=_string(raw, "display_name", origin, default=name),
        gpu=load_gpu(gpu_text),
        nvswitch=raw["nvswitch"],
        sources=_spec_sources(raw, origin, SYSTEM_NUMBERS),
        path=origin,
        **numbers,
    )


@functools.cache
def _builtin_gpu(name: str) -> GpuSpec:
    path = _builtin_files("gpu")[name]
    return _gpu_from_raw(_builtin_raw("gpu", name), name, str(path))


@functools.cache
def _builtin_system(name: str) -> SystemSpec:
    path = _builtin_files("system")[name]
    return _system_from_raw(_builtin_raw("system", name), name, str(path))
