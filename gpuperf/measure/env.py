"""The environment stamp written beside every measurement: what ran it, so numbers can be compared.

No hostname (results are published). Every probe tolerates failure: a missing field is None.
"""

from __future__ import annotations

import datetime as _dt
import platform
from typing import Any

from gpuperf import __version__
from gpuperf.measure.timing import TIMING_METHOD_VERSION


def host_available_bytes() -> float | None:
    """Memory the host can still give (Linux MemAvailable); None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_host_memory(need: float, what: str) -> None:
    """EnvironmentUnavailable (exit 3) before a CPU run that would need more memory than the host
    has free: it would otherwise grow until the OOM killer or a torch overflow stops it."""
    from gpuperf.errors import EnvironmentUnavailable
    from gpuperf.units import fmt_bytes

    have = host_available_bytes()
    if have is not None and need > have:
        raise EnvironmentUnavailable(
            f"{what} needs ~{fmt_bytes(need)} of host memory; {fmt_bytes(have)} is available"
        )


# One CPU rank is a Python process with torch and gloo loaded: ~0.3 GiB resident before its
# buffers. More processes than a few per core only time the scheduler.
CPU_RANK_BYTES = 0.3 * 2**30
CPU_RANKS_PER_CORE = 4


def check_cpu_ranks(ranks: int) -> None:
    """EnvironmentUnavailable (exit 3) before `--device cpu` starts more worker processes than
    this host can run: at most CPU_RANKS_PER_CORE per core, and their memory must fit."""
    import os

    from gpuperf.errors import EnvironmentUnavailable

    try:  # the cores this process may run on (taskset, a container's CPU set)
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    most = max(2, CPU_RANKS_PER_CORE * cores)
    if ranks > most:
        raise EnvironmentUnavailable(
            f"--device cpu runs one process per rank: {ranks} ranks on {cores} cores is more "
            f"than the {most} ({CPU_RANKS_PER_CORE} per core) this host can time"
        )
    check_host_memory(ranks * CPU_RANK_BYTES, f"{ranks} CPU ranks (one process each)")


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _nvml(index: int) -> dict[str, Any]:
    """Driver and clocks of GPU `index`: gpuperf.hardware.detect if present, else pynvml."""
    try:
        from gpuperf.hardware import detect  # written by another engineer; optional

        fn = getattr(detect, "gpu_environment", None)
        if fn is not None:
            got = fn()
            if isinstance(got, dict):
                return got
    except Exception:
        pass
    out: dict[str, Any] = {}
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            out["driver"] = _str(pynvml.nvmlSystemGetDriverVersion())
            probes = {
                "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "sm_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(
                    h, pynvml.NVML_CLOCK_SM
                ),
                "mem_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
                "temperature_c": lambda: pynvml.nvmlDeviceGetTemperature(
                    h, pynvml.NVML_TEMPERATURE_GPU
                ),
                "ecc_enabled": lambda: bool(pynvml.nvmlDeviceGetEccMode(h)[0]),
                "mig_enabled": lambda: bool(pynvml.nvmlDeviceGetMigMode(h)[0]),
            }
            for key, probe in probes.items():
                try:
                    out[key] = probe()
                except Exception:
                    out[key] = None
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # no driver, no library: the stamp says so
        out["nvml_error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return out


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def environment(device: str = "cuda") -> dict[str, Any]:
    """A JSON-able dict describing this machine and software for measurements on `device`."""
    env: dict[str, Any] = {
        "gpuperf": __version__,
        "timing_method": TIMING_METHOD_VERSION,
        "utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "device": device,
    }
    try:
        import torch
    except ImportError:
        env["torch"] = None
        return env
    env["torch"] = torch.__version__
    env["cuda"] = torch.version.cuda
    if not device.startswith("cuda") or not torch.cuda.is_available():
        env["cpu"] = _cpu_model()
        env["threads"] = torch.get_num_threads()
        return env
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    props = torch.cuda.get_device_properties(index)
    env.update(
        gpu=torch.cuda.get_device_name(index),
        gpu_count=torch.cuda.device_count(),
        compute_capability=f"{props.major}.{props.minor}",
        sms=props.multi_processor_count,
        gpu_memory_bytes=props.total_memory,
        l2_bytes=getattr(props, "L2_cache_size", None),
    )
    try:
        v = torch.cuda.nccl.version()
        env["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        env["nccl"] = None
    try:
        env["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        env["cudnn"] = None
    env.update(_nvml(index))
    return env
