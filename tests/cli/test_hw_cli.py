"""`gpuperf hw list|show|detect`: outputs, exit codes, one-line errors."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import types

import pytest

from gpuperf.cli import main

# Profiles with datasheet numbers only (no fitted [model] table), shown as not calibrated.
NEW_GPUS = ("h20", "l4", "a10g", "b300", "gb200", "mi300x")


class FakeNVML(types.ModuleType):
    """Enough of pynvml for `hw detect`: one device, or an init error."""

    class NVMLError(Exception):
        pass

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, devices=(), init_error=None):
        super().__init__("pynvml")
        self.devices, self.init_error = list(devices), init_error

    def nvmlInit(self):
        if self.init_error:
            raise self.NVMLError(self.init_error)

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return self.devices[handle][0]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(total=self.devices[handle][1])

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return 1620

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        return 1755


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """gpuperf.cli.main in-process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def assert_one_line_error(code: int, err: str, expected_code: int, text: str) -> None:
    assert code == expected_code
    assert err.startswith("gpuperf: error: ") and err.count("\n") == 1, err
    assert text in err and "Traceback" not in err


def test_list_json(capsys):
    code, out, _ = run(capsys, "hw", "list", "--format", "json")
    assert code == 0
    data = json.loads(out)
    gpus = {g["name"]: g for g in data["gpus"]}
    assert len(gpus) == 16
    assert gpus["h100-sxm5-80gb"]["bf16_tflops"] == 989.4
    assert gpus["h100-sxm5-80gb"]["fp8_tflops"] == 1978.9
    assert gpus["h100-sxm5-80gb"]["bf16_ridge_flop_per_byte"] == 295.3
    assert gpus["h100-sxm5-80gb"]["hbm_tbps"] == 3.35
    assert gpus["a100-sxm4-80gb"]["fp8_tflops"] is None
    assert "a100" in gpus["a100-sxm4-80gb"]["aliases"]
    assert gpus["h100-sxm5-80gb"]["calibrated"] is True
    assert gpus["h200-sxm-141gb"]["calibrated"] is True
    for name in NEW_GPUS:
        assert gpus[name]["calibrated"] is False, name
    assert gpus["a10g"]["fp8_tflops"] is None and gpus["l4"]["fp8_tflops"] == 242.5
    gb200 = gpus["gb200"]
    assert (gb200["sms"], gb200["bf16_tflops"], gb200["hbm_gib"]) == (152, 2500, 186)
    systems = {s["name"]: s for s in data["systems"]}
    nvl72 = systems["gb200-nvl72"]
    assert (nvl72["gpu"], nvl72["gpus_per_node"], nvl72["nics_per_node"]) == ("gb200", 72, 72)
    assert systems["hgx-b300"]["nic_gbps_per_direction"] == 100  # ConnectX-8 800 Gb/s
    assert systems["dgx-h100"]["gpu"] == "h100-sxm5-80gb"
    assert systems["dgx-h100"]["nic_gbps_per_direction"] == 50


def test_list_csv_and_table(capsys):
    code, out, _ = run(capsys, "hw", "list", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and len(rows) == 22
    assert {r["kind"] for r in rows} == {"gpu", "system"}
    b200 = next(r for r in rows if r["name"] == "b200")
    assert (b200["bf16_tflops"], b200["hbm_gib"]) == ("2250", "180")
    calibrated = {r["name"]: r["calibrated"] for r in rows if r["kind"] == "gpu"}
    assert calibrated["h100-sxm5-80gb"] == "True"
    assert all(calibrated[name] == "False" for name in NEW_GPUS)
    code, out, _ = run(capsys, "hw", "list")
    assert code == 0
    for header in ("BF16", "TFLOP/s", "HBM", "GiB", "TB/s", "FLOP/B", "GB/s"):
        assert header in out
    assert "h200-sxm-141gb" in out and "dgx-h200" in out
    assert "gb200-nvl72" in out and "hgx-b300" in out
    assert "cal." in out and "not calibrated" in out.replace("\n", " ")
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("│")}
    for name in NEW_GPUS:  # each new GPU's row ends in "no": not calibrated
        assert rows[name].rstrip("│ ").endswith("no"), rows[name]
    assert rows["h100-sxm5-80gb"].rstrip("│ ").endswith("yes")


def test_show_gpu_json(capsys):
    code, out, _ = run(capsys, "hw", "show", "H100", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["kind"] == "gpu" and data["name"] == "h100-sxm5-80gb"
    assert data["spec"]["peak_flops"]["bf16"] == pytest.approx(989.4e12)
    assert data["spec"]["hbm_bw"] == 3.35e12
    assert data["ridge_flop_per_byte"]["bf16"] == pytest.approx(295.34, abs=0.01)
    fields = {f["field"]: f for f in data["fields"]}
    assert fields["hbm_bw"]["unit"] == "GB/s" and fields["hbm_bw"]["value"] == 3350
    assert "datasheet" in fields["peak_bf16"]["source"]
    # The H100's [model] table is fitted to measurements: its values are not gpuperf's defaults.
    assert fields["calibrated"]["value"] is True
    assert fields["model.gemm_eff"]["source"].startswith("set in the profile's [model] table")
    assert fields["model.attn_bwd_eff"]["source"].startswith("set in the profile's [model] table")
    assert fields["model.vector_eff"]["source"] == "gpuperf default (uncalibrated)"  # not fitted


BORROWED = ("h20", "gb200", "b300")  # params_from = "h200-sxm-141gb"


@pytest.mark.parametrize("name", NEW_GPUS)
def test_show_new_gpu_is_not_calibrated_and_sourced(capsys, name):
    code, out, _ = run(capsys, "hw", "show", name, "--format", "json")
    data = json.loads(out)
    fields = {f["field"]: f for f in data["fields"]}
    assert code == 0 and data["name"] == name
    assert fields["calibrated"]["value"] is False
    if name in BORROWED:  # the H200's fitted parameters, named as such
        assert "h200-sxm-141gb's calibrated parameters" in fields["calibrated"]["source"]
        assert "not measured on this GPU" in fields["model.gemm_eff"]["source"]
    else:
        assert "no [model] table" in fields["calibrated"]["source"]
        assert fields["model.gemm_eff"]["source"] == "gpuperf default (uncalibrated)"
    numbers = ["sms", "boost_clock", "hbm_capacity", "hbm_bw", "l2", "smem_per_sm", "nvlink_bw"]
    numbers += ["pcie_bw"] + [f"peak_{dt}" for dt in data["spec"]["peak_flops"]]
    for field in numbers:
        assert len(fields[field]["source"]) > 10, (name, field)


@pytest.mark.parametrize("name", NEW_GPUS)
def test_predict_runs_on_every_new_gpu(capsys, name):
    """llama3-8b in bf16 (15 GiB of weights) fits on each, the 24 GiB L4 and A10G included."""
    code, out, err = run(capsys, "predict", "llama3-8b", "--gpu", name, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["total_ms"] > 0 and data["fits"] is True and data["gpu"] == name


def test_predict_fp8_on_a10g_is_one_line(capsys):
    code, _, err = run(capsys, "predict", "llama3-8b", "--gpu", "a10g", "--dtype", "fp8")
    assert_one_line_error(code, err, 2, "has no fp8 peak")
    code, _, err = run(capsys, "predict", "llama3-8b", "--gpu", "l4", "--dtype", "fp8")
    assert code == 0, err


def test_predict_on_new_systems(capsys):
    args = ("predict", "allreduce", "--bytes", "1G", "--format", "json")
    code, out, err = run(capsys, *args, "--system", "gb200-nvl72")
    assert code == 0, err
    assert '"ranks": 72' in out  # one node: all 72 GPUs in the NVLink domain
    code, out, err = run(capsys, *args, "--system", "hgx-b300", "--nodes", "2")
    assert code == 0, err
    assert '"ranks": 16' in out


def test_show_a100_marks_fp8_unsupported(capsys):
    code, out, _ = run(capsys, "hw", "show", "a100", "--format", "csv")
    rows = {r["field"]: r for r in csv.DictReader(io.StringIO(out))}
    assert code == 0
    assert rows["peak_fp8"]["unit"] == "not supported" and rows["peak_fp8"]["value"] == ""
    assert "ridge_fp8" not in rows
    assert rows["ridge_bf16"]["value"] == "153"  # 312e12 / 2039e9


def test_show_system_and_user_file(capsys, tmp_path):
    code, out, _ = run(capsys, "hw", "show", "gb200-nvl72", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["kind"] == "system" and data["spec"]["gpus_per_node"] == 72
    code, out, _ = run(capsys, "hw", "show", "dgx-b200", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["kind"] == "system" and data["name"] == "hgx-b200"
    assert data["spec"]["gpu"]["name"] == "b200" and data["spec"]["nvlink_bw"] == 900e9
    path = tmp_path / "cal.toml"
    path.write_text('base = "h100"\n[model]\ngemm_eff = 0.72\n')
    code, out, _ = run(capsys, "hw", "show", str(path), "--format", "json")
    fields = {f["field"]: f for f in json.loads(out)["fields"]}
    assert code == 0 and fields["model.gemm_eff"]["value"] == 0.72
    assert fields["model.gemm_eff"]["source"] == f"set in {path}"
    code, out, _ = run(capsys, "hw", "show", "h200")
    assert code == 0 and "(as above)" in out and "141" in out


@pytest.mark.parametrize(
    ("args", "content", "expected"),
    [
        (["hw", "show", "h1000"], None, "unknown profile 'h1000'; did you mean h100"),
        (["hw", "show", "missing.toml"], None, "missing.toml does not exist"),
        (["hw", "show", "{file}"], "sms = = 1\n", "malformed TOML"),
        (["hw", "show", "{file}"], 'base = "h100"\nsmz = 1\n', "did you mean 'sms'"),
        (["hw", "show", "{file}"], 'base = "h100"\nsms = 0\n', "sms must be positive"),
        (["hw", "show", "{file}"], 'base = "h100"\nsms = "many"\n', "sms must be a number"),
        (["hw", "show", "{file}"], 'arch = "hopper"\n', "missing required field(s)"),
        (["hw", "list", "--format", "xml"], None, "'xml' is not one of"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, tmp_path, args, content, expected):
    if content is not None:
        path = tmp_path / "bad.toml"
        path.write_text(content)
        args = [str(path) if a == "{file}" else a for a in args]
    code, _, err = run(capsys, *args)
    assert_one_line_error(code, err, 2, expected)


def test_detect_with_fake_gpu(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML([("NVIDIA H100 PCIe", 80 * 2**30)]))
    code, out, _ = run(capsys, "hw", "detect", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["profile"] == "h100-pcie"
    assert data["environment"]["cuda_driver_version"] == "12.4"
    code, out, _ = run(capsys, "hw", "detect")
    assert code == 0 and "h100-pcie" in out and "MHz" in out


def test_detect_without_gpu_exits_3(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML(init_error="Driver Not Loaded"))
    code, _, err = run(capsys, "hw", "detect")
    assert_one_line_error(code, err, 3, "no NVIDIA GPU found (NVML: Driver Not Loaded)")


def test_every_help_has_an_example(capsys):
    for args in (["hw"], ["hw", "list"], ["hw", "show"], ["hw", "detect"]):
        code, out, _ = run(capsys, *args, "--help")
        assert code == 0 and "Example" in out and "gpuperf hw" in out


def test_real_entry_point_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "gpuperf.cli", "hw", "show", "tpu-v9"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("gpuperf: error: unknown profile 'tpu-v9'")
    assert proc.stderr.count("\n") == 1
    proc = subprocess.run(
        [sys.executable, "-m", "gpuperf.cli", "hw", "show", "l40s", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and json.loads(proc.stdout)["spec"]["hbm_bw"] == 864e9
