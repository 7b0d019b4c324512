"""GPU detection with a fake pynvml module (no driver needed)."""

from __future__ import annotations

import sys
import types

import pytest

from gpuperf.errors import EnvironmentUnavailable
from gpuperf.hardware import detect, loader
from gpuperf.hardware.loader import load_gpu

GIB = 2**30


class FakeNVML(types.ModuleType):
    """The subset of pynvml that detect.py calls; devices are (name, memory bytes)."""

    class NVMLError(Exception):
        pass

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, devices=(), init_error=None, clocks_fail=False, name_as_bytes=False):
        super().__init__("pynvml")
        self.devices = list(devices)
        self.init_error = init_error
        self.clocks_fail = clocks_fail
        self.name_as_bytes = name_as_bytes
        self.shutdowns = 0

    def nvmlInit(self):
        if self.init_error:
            raise self.NVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        name = self.devices[handle][0]
        return name.encode() if self.name_as_bytes else name

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(total=self.devices[handle][1], free=0, used=0)

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetClockInfo(self, handle, clock):
        if self.clocks_fail:
            raise self.NVMLError("Not Supported")
        return {1: 1755, 2: 2619}[clock]

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        return {1: 1980, 2: 2619}[clock]


@pytest.fixture
def fake(monkeypatch):
    def install(*args, **kwargs) -> FakeNVML:
        module = FakeNVML(*args, **kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    return install


# Device names as NVML reports them; memory totals as nvidia-smi shows them (MiB).
@pytest.mark.parametrize(
    ("device", "mib", "profile"),
    [
        ("NVIDIA A100-SXM4-40GB", 40960, "a100-sxm4-40gb"),
        ("NVIDIA A100-SXM4-80GB", 81920, "a100-sxm4-80gb"),
        ("A100-SXM4-40GB", 40960, "a100-sxm4-40gb"),  # older drivers omit "NVIDIA "
        ("NVIDIA A100 80GB PCIe", 81920, "a100-pcie-80gb"),
        ("NVIDIA H100 80GB HBM3", 81559, "h100-sxm5-80gb"),
        ("NVIDIA H100 PCIe", 81559, "h100-pcie"),
        ("NVIDIA H100 NVL", 95830, "h100-nvl"),
        ("NVIDIA H200", 143771, "h200-sxm-141gb"),
        ("NVIDIA B200", 182631, "b200"),
        ("NVIDIA L40S", 46068, "l40s"),
        ("NVIDIA GeForce RTX 4090", 24564, "rtx4090"),
    ],
)
def test_detect_known_gpus(fake, device, mib, profile):
    nvml = fake([(device, mib * 2**20)])
    assert detect.detect_gpu().name == profile
    assert nvml.shutdowns == 1


def test_bytes_names_and_index(fake):
    fake([("NVIDIA L40S", 48 * GIB), ("NVIDIA H100 80GB HBM3", 80 * GIB)], name_as_bytes=True)
    assert detect.detect_gpu(1).name == "h100-sxm5-80gb"
    with pytest.raises(EnvironmentUnavailable, match="index 2 out of range: NVML sees 2"):
        detect.detect_gpu(2)


def test_memory_disambiguates_a_shared_name(monkeypatch):
    shared = {"a100-sxm4-40gb": ("NVIDIA A100",), "a100-sxm4-80gb": ("NVIDIA A100",)}
    monkeypatch.setattr(loader, "gpu_nvml_names", lambda: shared)
    assert detect.match_profile("NVIDIA A100", 40 * GIB).name == "a100-sxm4-40gb"
    assert detect.match_profile("nvidia  a100", 79.6 * GIB).name == "a100-sxm4-80gb"


def test_auto_goes_through_detection(fake):
    fake([("NVIDIA H200", 143771 * 2**20)])
    assert load_gpu("auto") is load_gpu("h200")
    assert load_gpu("AUTO").name == "h200-sxm-141gb"


def test_no_driver(fake):
    fake(init_error="Driver Not Loaded")
    with pytest.raises(EnvironmentUnavailable) as info:
        detect.detect_gpu()
    assert str(info.value) == "no NVIDIA GPU found (NVML: Driver Not Loaded); pass --gpu NAME"


def test_no_devices(fake):
    fake([])
    with pytest.raises(EnvironmentUnavailable, match="no NVIDIA GPU found.*pass --gpu NAME"):
        detect.detect_gpu()


def test_pynvml_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    with pytest.raises(EnvironmentUnavailable, match="nvidia-ml-py is not installed"):
        detect.detect_gpu()
    assert detect.gpu_environment() == {}


def test_unknown_gpu_names_the_device_and_suggests_a_file(fake):
    fake([("NVIDIA Tesla V100-SXM2-32GB", 32 * GIB)])
    with pytest.raises(EnvironmentUnavailable) as info:
        detect.detect_gpu()
    message = str(info.value)
    assert "'NVIDIA Tesla V100-SXM2-32GB' (32 GiB) has no built-in profile" in message
    assert "--gpu path.toml" in message and "\n" not in message


def test_gpu_environment(fake):
    nvml = fake([("NVIDIA H100 80GB HBM3", 81559 * 2**20)])
    env = detect.gpu_environment()
    assert env == {
        "count": 1,
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_bytes": 81559 * 2**20,
        "clock_sm_mhz": 1755,
        "clock_sm_max_mhz": 1980,
        "clock_mem_mhz": 2619,
        "clock_mem_max_mhz": 2619,
    }
    assert nvml.shutdowns == 1


def test_gpu_environment_skips_what_the_driver_does_not_report(fake):
    fake([("NVIDIA H100 80GB HBM3", 80 * GIB)], clocks_fail=True)
    env = detect.gpu_environment()
    assert "clock_sm_mhz" not in env and "clock_mem_mhz" not in env
    assert env["clock_sm_max_mhz"] == 1980 and env["name"] == "NVIDIA H100 80GB HBM3"


def test_gpu_environment_without_nvml(fake):
    fake(init_error="NVML Shared Library Not Found")
    assert detect.gpu_environment() == {}
