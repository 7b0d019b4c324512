"""Which GPU is this? NVML (package nvidia-ml-py, imported lazily) -> the matching built-in profile.

Matching: the NVML device name against each profile's `nvml_names` (case-insensitive, with or
without the "NVIDIA " prefix older drivers omit); when several profiles share a name, the one whose
capacity is closest to NVML's memory total wins (A100 40 vs 80 GB).
"""

from __future__ import annotations

import contextlib
from typing import Any

from gpuperf.errors import EnvironmentUnavailable
from gpuperf.hardware import loader
from gpuperf.hardware.spec import GpuSpec


def detect_gpu(index: int = 0, hint: str = "pass --gpu NAME") -> GpuSpec:
    """The built-in profile of GPU `index`, or EnvironmentUnavailable ending with `hint` (what
    the caller's user can do instead)."""
    nvml = _init_nvml(hint)
    try:
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            raise EnvironmentUnavailable(f"no NVIDIA GPU found (NVML sees 0 devices); {hint}")
        if not 0 <= index < count:
            raise EnvironmentUnavailable(
                f"GPU index {index} out of range: NVML sees {count} GPU(s)"
            )
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(nvml.nvmlDeviceGetName(handle))
        memory = float(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    except nvml.NVMLError as exc:
        raise EnvironmentUnavailable(f"no NVIDIA GPU found (NVML: {exc}); {hint}") from None
    finally:
        _shutdown(nvml)
    return match_profile(name, memory)


def match_profile(device_name: str, memory_bytes: float) -> GpuSpec:
    """The built-in profile whose nvml_names contain `device_name`, nearest in memory size."""
    key = _norm(device_name)
    candidates = [
        loader.load_gpu(name)
        for name, nvml_names in loader.gpu_nvml_names().items()
        if key in {_norm(n) for n in nvml_names}
    ]
    if not candidates:
        raise EnvironmentUnavailable(
            f"GPU {device_name!r} ({memory_bytes / 2**30:.0f} GiB) has no built-in profile; "
            'write one (fields: `gpuperf hw show h100`; `base = "h100"` inherits) '
            "and pass --gpu path.toml"
        )
    return min(candidates, key=lambda g: abs(g.hbm_bytes - memory_bytes))


def gpu_environment(index: int = 0) -> dict[str, Any]:
    """Stamp for measurements: name, driver and CUDA driver versions, clocks, memory, GPU count.

    Returns {} when NVML is unavailable; fields the driver does not report are left out.
    """
    try:
        nvml = _init_nvml()
    except EnvironmentUnavailable:
        return {}
    env: dict[str, Any] = {}
    try:
        env["count"] = nvml.nvmlDeviceGetCount()
        env["driver_version"] = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = _try(nvml, nvml.nvmlSystemGetCudaDriverVersion)
        if cuda is not None:
            env["cuda_driver_version"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
        if env["count"] > index:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            env["index"] = index
            env["name"] = _text(nvml.nvmlDeviceGetName(handle))
            env["memory_total_bytes"] = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            for label, clock in (("sm", nvml.NVML_CLOCK_SM), ("mem", nvml.NVML_CLOCK_MEM)):
                now = _try(nvml, nvml.nvmlDeviceGetClockInfo, handle, clock)
                top = _try(nvml, nvml.nvmlDeviceGetMaxClockInfo, handle, clock)
                if now is not None:
                    env[f"clock_{label}_mhz"] = now
                if top is not None:
                    env[f"clock_{label}_max_mhz"] = top
    except nvml.NVMLError:
        pass  # keep what was read; a stamp is best effort
    finally:
        _shutdown(nvml)
    return env


def _init_nvml(hint: str = "pass --gpu NAME") -> Any:
    try:
        import pynvml
    except ImportError:
        raise EnvironmentUnavailable(
            f"no NVIDIA GPU found (NVML: package nvidia-ml-py is not installed); {hint}"
        ) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise EnvironmentUnavailable(f"no NVIDIA GPU found (NVML: {exc}); {hint}") from None
    return pynvml


def _shutdown(nvml: Any) -> None:
    with contextlib.suppress(nvml.NVMLError):
        nvml.nvmlShutdown()


def _try(nvml: Any, func: Any, *args: Any) -> Any:
    try:
        return func(*args)
    except nvml.NVMLError:
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _norm(name: str) -> str:
    text = " ".join(name.lower().split())
    return text.removeprefix("nvidia ")
