"""Hardware profiles and loader: published numbers, aliases, every bad input, base= inheritance."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuperf.errors import InputError
from gpuperf.hardware import loader
from gpuperf.hardware.loader import aliases, gpu_names, load_gpu, load_system, system_names

tomllib = loader.tomllib  # tomli on Python 3.10

# name: (SMs, dense BF16 TFLOP/s, HBM GiB, HBM GB/s). Source: shared reference modeling-facts.md,
# sections 1a/1b (NVIDIA datasheets; Hopper/Blackwell sparse numbers halved), and for the profiles
# below the blank line their own [sources]: NVIDIA L4 datasheet (242* / 2), GB200 NVL72 table
# (superchip 10 PF* BF16, 372 GB, 16 TB/s, / 2 GPUs / 2), Blackwell Ultra datasheet HGX B300
# column (4.5 PF*, 270 GB, 7.7 TB/s), AMD MI300X page (1,307.4 dense), the H20 spec sheet
# (148 dense) and, for the A10G, which NVIDIA never published, 80 SMs x 1.71 GHz x 512 FLOP/clk.
PUBLISHED = {
    "a100-sxm4-40gb": (108, 312, 40, 1555),
    "a100-sxm4-80gb": (108, 312, 80, 2039),
    "a100-pcie-80gb": (108, 312, 80, 1935),
    "h100-sxm5-80gb": (132, 989.4, 80, 3350),
    "h100-pcie": (114, 756, 80, 2000),
    "h100-nvl": (132, 835.5, 94, 3900),
    "h200-sxm-141gb": (132, 989.4, 141, 4800),
    "b200": (148, 2250, 180, 7700),
    "l40s": (142, 362.05, 48, 864),
    "rtx4090": (128, 165.2, 24, 1008),
    "h20": (78, 148, 96, 4000),
    "l4": (58, 121, 24, 300),
    "a10g": (80, 70, 24, 600),
    "b300": (148, 2250, 270, 7700),
    "gb200": (152, 2500, 186, 8000),
    "mi300x": (304, 1307.4, 192, 5300),
}
# Datasheet numbers only: no [model] table fitted to measurements of that GPU.
NOT_CALIBRATED = ("h20", "l4", "a10g", "b300", "gb200", "mi300x")
SYSTEMS = ["dgx-a100", "dgx-h100", "dgx-h200", "gb200-nvl72", "hgx-b200", "hgx-b300"]
# "Derived ridge points (dense BF16 FLOP per HBM byte)" from the same reference.
PUBLISHED_RIDGE = {
    "a100-sxm4-40gb": 201,
    "a100-sxm4-80gb": 153,
    "h100-sxm5-80gb": 295,
    "h100-pcie": 378,
    "h200-sxm-141gb": 206,
    "b200": 292,
    "l40s": 419,
    "rtx4090": 164,
    "mi300x": 247,
}


def write(tmp_path: Path, text: str, name: str = "my.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def input_error(spec: str, loader_fn=load_gpu) -> str:
    with pytest.raises(InputError) as info:
        loader_fn(spec)
    message = str(info.value)
    assert "\n" not in message, message
    return message


# ----------------------------------------------------------------------------- built-ins


def test_every_listed_profile_is_shipped():
    assert gpu_names() == sorted(PUBLISHED)
    assert system_names() == SYSTEMS


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_profile_matches_published_numbers(name):
    gpu = load_gpu(name)
    sms, bf16, hbm_gib, hbm_gbps = PUBLISHED[name]
    assert gpu.name == name
    assert gpu.sms == sms
    assert gpu.peak("bf16") == pytest.approx(bf16 * 1e12)
    assert gpu.peak("fp16") == gpu.peak("bf16")
    assert gpu.hbm_bytes == hbm_gib * 2**30
    assert gpu.hbm_bw == pytest.approx(hbm_gbps * 1e9)
    assert gpu.l2_bytes > 1e6 and gpu.smem_per_sm_bytes >= 64 * 1024  # MI300X LDS: 64 KiB
    assert gpu.pcie_bw in (32e9, 64e9, 128e9)  # Gen4 / Gen5 / Gen6 (B300) x16 per direction
    if name in PUBLISHED_RIDGE:
        assert gpu.ridge("bf16") == pytest.approx(PUBLISHED_RIDGE[name], rel=0.01)


def test_headline_numbers():
    h100, h200, a100 = load_gpu("h100"), load_gpu("h200"), load_gpu("a100")
    assert h100.peak("bf16") == pytest.approx(989.4e12)
    assert dict(h200.peak_flops) == dict(h100.peak_flops)  # same die; only memory differs
    assert a100.peak("bf16") == pytest.approx(312e12)
    assert h100.ridge("bf16") == pytest.approx(989.4e12 / 3.35e12)  # ~295.3 FLOP/B
    assert h100.nvlink_bw == 450e9  # 900 GB/s bidirectional
    assert h100.l2_bytes == 50 * 2**20 and a100.l2_bytes == 41943040  # deviceQuery bytes


def test_peaks_are_dense_not_sparse():
    # Hopper datasheet sparse BF16 is 1,979; dense is half. FP8 is 2x BF16, TF32 half of BF16.
    for name in ("h100-sxm5-80gb", "h200-sxm-141gb", "h100-pcie", "h100-nvl", "b200"):
        gpu = load_gpu(name)
        assert gpu.peak("fp8") == pytest.approx(2 * gpu.peak("bf16"), rel=0.001)
        # B200 prints TF32 2.2 PF* against BF16 4.5 PF*, so TF32 is only ~half of BF16 there.
        assert gpu.peak("tf32") == pytest.approx(gpu.peak("bf16") / 2, rel=0.025)
    assert load_gpu("h100").peak("bf16") < 1000e12
    # The new profiles: FP8 twice BF16, TF32 half (L4 rounds: 242.5 vs 2 x 121).
    for name in ("h20", "l4", "b300", "gb200", "mi300x"):
        gpu = load_gpu(name)
        assert gpu.peak("fp8") == pytest.approx(2 * gpu.peak("bf16"), rel=0.005), name
        assert gpu.peak("tf32") == pytest.approx(gpu.peak("bf16") / 2, rel=0.025), name


def test_gb200_gpu_is_not_an_hgx_b200():
    # GB200 NVL72 table vs HGX B200 table: more SMs (152 measured vs 148), higher peaks, 186 GB.
    gb200, b200, b300 = load_gpu("gb200"), load_gpu("b200"), load_gpu("b300")
    assert (gb200.sms, b200.sms, b300.sms) == (152, 148, 148)
    assert gb200.peak("bf16") == 2500e12 and b200.peak("bf16") == 2250e12
    assert gb200.peak("fp64") == 40e12 and b200.peak("fp64") == 37e12
    assert gb200.hbm_bw == 8000e9 and b200.hbm_bw == 7700e9
    # Blackwell Ultra: same BF16/FP8 as B200, FP64 and INT8 cut, more memory, PCIe Gen6.
    assert b300.peak("fp8") == b200.peak("fp8") and b300.peak("fp64") == 1.2e12
    assert b300.peak("int8") < b200.peak("int8") / 20
    assert b300.hbm_bytes == 270 * 2**30 and b300.pcie_bw == 128e9
    assert gb200.arch == b300.arch == "blackwell" and b300.compute_capability == "10.3"


def test_fp8_only_where_the_hardware_has_it():
    a10g, l4 = load_gpu("a10g"), load_gpu("l4")
    assert "fp8" not in a10g.peak_flops and "int8" not in a10g.peak_flops  # Ampere; not published
    with pytest.raises(
        InputError, match=r"A10G.*no fp8 peak.*supports: fp64, fp32, tf32, bf16, fp16"
    ):
        a10g.peak("fp8")
    assert l4.peak("fp8") == 242.5e12  # Ada has FP8
    assert load_gpu("mi300x").peak("fp8") == pytest.approx(2614.9e12)
    assert load_gpu("h20").peak("fp8") == 296e12


def test_calibrated_comes_from_the_model_table():
    for name in gpu_names():
        raw = tomllib.loads((loader.PROFILES_DIR / f"{name}.toml").read_text())
        assert load_gpu(name).calibrated == ("model" in raw), name
    assert load_gpu("h100").calibrated and load_gpu("h200").calibrated
    for name in NOT_CALIBRATED:
        assert not load_gpu(name).calibrated, name


def test_every_arch_is_one_the_code_knows():
    # comm.py maps unknown archs (ada, cdna3) to the ampere NCCL tables; nothing else keys off arch.
    archs = {load_gpu(name).arch for name in gpu_names()}
    assert archs == {"ampere", "ada", "hopper", "blackwell", "cdna3"}
    mi300x = load_gpu("mi300x")
    assert (mi300x.arch, mi300x.compute_capability, mi300x.sms) == ("cdna3", "9.4", 304)
    assert mi300x.smem_per_sm_bytes == 64 * 2**10 and mi300x.nvlink_bw == 448e9  # 7 x 64 GB/s


def test_an_arch_the_code_does_not_know_is_refused_with_the_known_ones(tmp_path):
    """The collective model would take an unknown arch for Ampere without a word."""
    message = input_error(write(tmp_path, 'base = "h100"\narch = "foo"\n'))
    assert "my.toml: unknown arch 'foo'" in message
    assert "volta, ampere, ada, hopper, blackwell, cdna3" in message
    assert "did you mean hopper?" in input_error(write(tmp_path, 'base = "h100"\narch = "hoper"\n'))
    assert load_gpu(write(tmp_path, 'base = "h100"\narch = "Ada"\n')).arch == "ada"


def test_fp8_on_a100_is_a_clear_input_error():
    a100 = load_gpu("a100")
    assert "fp8" not in a100.peak_flops
    with pytest.raises(InputError, match=r"no fp8 peak.*supports: fp64, fp32, tf32, bf16, fp16"):
        a100.peak("fp8")
    with pytest.raises(InputError, match="no fp8 peak"):
        a100.ridge("fp8")


def test_aliases_and_case_insensitivity():
    table = aliases()
    assert table["a100"] == "a100-sxm4-80gb"
    assert table["h100"] == "h100-sxm5-80gb"
    assert table["h200"] == "h200-sxm-141gb"
    assert load_gpu("b200").name == "b200"
    assert table["hgx-h100"] == "dgx-h100"
    assert load_gpu("H100").name == "h100-sxm5-80gb"
    assert load_gpu(" H100_SXM5_80GB ").name == "h100-sxm5-80gb"
    assert load_gpu("A100") is load_gpu("a100-sxm4-80gb")  # cached, one object


def test_aliases_never_collide_with_each_other_or_names():
    seen: dict[str, str] = {}
    for kind in ("gpu", "system"):
        folder = loader.PROFILES_DIR if kind == "gpu" else loader.SYSTEMS_DIR
        for path in folder.glob("*.toml"):
            for alias in tomllib.loads(path.read_text()).get("aliases", []):
                assert alias not in seen, f"{alias} in {path.stem} and {seen[alias]}"
                assert alias not in gpu_names() + system_names()
                seen[alias] = path.stem


def test_every_number_has_a_source_comment_and_a_sources_entry():
    paths = [*loader.PROFILES_DIR.glob("*.toml"), *loader.SYSTEMS_DIR.glob("*.toml")]
    assert len(paths) == len(PUBLISHED) + len(SYSTEMS)
    number_line = re.compile(r"^\s*[a-z0-9_]+\s*=\s*(-?[\d.]+|true|false)\b")
    for path in paths:
        for line in path.read_text().splitlines():
            if number_line.match(line):
                assert "# source:" in line, f"{path.name}: {line}"
        raw = tomllib.loads(path.read_text())
        # A shipped [model] table must come from committed measurements of that very GPU.
        results = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / path.stem
        assert "model" not in raw or results.is_dir(), f"{path.name}: [model] without results"
    for name in gpu_names():
        gpu = load_gpu(name)
        needed = {"sms", "boost_clock_mhz", "hbm_bytes", "hbm_bw", "l2_bytes"}
        needed |= {"smem_per_sm_bytes", "nvlink_bw", "pcie_bw"}
        needed |= {f"peak_flops.{dt}" for dt in gpu.peak_flops}
        assert needed <= set(gpu.sources), f"{name}: {needed - set(gpu.sources)}"
        assert all(len(text) > 10 for text in gpu.sources.values())
    for name in system_names():
        assert {"gpus_per_node", "nvswitch", "nvlink_bw", "nics_per_node", "nic_bw"} <= set(
            load_system(name).sources
        )


def test_systems():
    dgx = load_system("dgx-h100")
    assert dgx.gpu is load_gpu("h100")
    assert (dgx.gpus_per_node, dgx.nvswitch, dgx.nics_per_node) == (8, True, 8)
    assert dgx.nvlink_bw == 450e9
    assert dgx.nic_bw == 50e9  # 400 Gb/s per direction
    assert load_system("dgx-a100").nic_bw == 25e9  # HDR 200 Gb/s
    assert load_system("dgx-h200").gpu.name == "h200-sxm-141gb"
    assert load_system("hgx-b200").nvlink_bw == 900e9  # 1.8 TB/s bidirectional
    assert load_system("DGX-B200").name == "hgx-b200"


def test_new_systems():
    nvl72 = load_system("gb200-nvl72")
    assert nvl72.gpu is load_gpu("gb200")
    assert (nvl72.gpus_per_node, nvl72.nvswitch, nvl72.nics_per_node) == (72, True, 72)
    assert nvl72.nvlink_bw == 900e9  # 1.8 TB/s bidirectional per GPU, any of the 72
    assert nvl72.nic_bw == 50e9  # ConnectX-7 400 Gb/s, one per GPU
    assert load_system("dgx-gb200") is nvl72
    b300 = load_system("dgx-b300")
    assert b300.name == "hgx-b300" and b300.gpu is load_gpu("b300")
    assert (b300.gpus_per_node, b300.nvswitch, b300.nics_per_node) == (8, True, 8)
    assert b300.nvlink_bw == 900e9 and b300.nic_bw == 100e9  # ConnectX-8 800 Gb/s


# ----------------------------------------------------------------------------- bad input

GOOD = """
display_name = "Test GPU"
arch = "hopper"
compute_capability = "9.0"
sms = 132
boost_clock_mhz = 1980
hbm_gib = 80
hbm_bw_gbps = 3350
l2_mib = 50
smem_per_sm_kib = 228
pcie_gbps_per_direction = 64
[peak_tflops]
bf16 = 989.4
"""


def test_user_file_without_base(tmp_path):
    gpu = load_gpu(write(tmp_path, GOOD))
    assert gpu.name == "my" and gpu.peak("bf16") == pytest.approx(989.4e12)
    assert gpu.nvlink_bw == 0.0  # optional, none
    assert gpu.hbm_bytes == 80 * 2**30
    with pytest.raises(InputError, match="no fp32 peak"):
        gpu.peak("fp32")


def test_unknown_names_suggest_close_ones():
    assert "did you mean h100" in input_error("h1000")
    assert "a100" in input_error("a10O")
    msg = input_error("tpu-v5")
    assert "unknown gpu 'tpu-v5'" in msg and "h100-sxm5-80gb" in msg
    assert "dgx-h100" in input_error("dgx-h10", load_system)
    assert "is a system" in input_error("dgx-h100")
    assert "is a gpu" in input_error("h100", load_system)


def test_missing_file(tmp_path):
    assert "does not exist" in input_error(str(tmp_path / "nope.toml"))


def test_malformed_toml_names_file_and_line(tmp_path):
    path = write(tmp_path, 'arch = "hopper"\nsms = = 3\n')
    msg = input_error(path)
    assert path in msg and "malformed TOML" in msg and "line 2" in msg


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("sm = 132\n", "unknown key 'sm'; did you mean 'sms'"),
        ("[model]\ngemm_efficiency = 0.7\n", "unknown key model.'gemm_efficiency'"),
        ("[model]\ngemm_eff = 80\n", "is a fraction"),
        ("[model]\ngemm_eff = -0.1\n", "must be positive"),
        ("[model]\nsustained_clock_frac = 0\n", "must be positive"),  # compute time / it
        ("[model]\nsustained_clock_frac = 50\n", "is a fraction"),  # MFU 154% otherwise
        ("[model]\ngemm_tail_frac = 1.5\n", "is a fraction"),
        ("[model.extra]\nfoo = 'x'\n", "model.extra.foo must be a number"),
        # a kernel divides by a rate or an efficiency: 0 would be a crash, not a prediction
        ("[model.extra]\nattn_mask_sm_bw = 0\n", "attn_mask_sm_bw must be above 0"),
        ("[model.extra]\ngrouped_gemm_eff = 0\n", "grouped_gemm_eff must be above 0"),
        ("[model.extra]\ncustom_ar_busbw = 0\n", "custom_ar_busbw must be above 0"),
        ("[model.extra]\ngrouped_gemm_eff = 1.5\n", "is a fraction (at most 1)"),
        ("[model.extra]\nw4_overlap = 2\n", "is a fraction (at most 1)"),
        ("[model.extra]\ncomm_floor_s = -1e-6\n", "comm_floor_s must be 0 or more"),
        ("[model.extra]\ncomm_channel_copy_bw = -1\n", "comm_channel_copy_bw must be 0 or more"),
        ("[sources]\nflux = 'x'\n", "sources.flux names no field"),
        ("[sources]\nsms = 3\n", "sources.sms must be a string"),
        ("aliases = 'h100'\n", "aliases must be a list of strings"),
    ],
)
def test_bad_additions(tmp_path, change, expected):
    text = (
        GOOD.replace("[peak_tflops]", change + "[peak_tflops]")
        if change[0] != "["
        else GOOD + change
    )
    assert expected in input_error(write(tmp_path, text))


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("sms = 132", "", "missing required field(s): sms"),
        ("bf16 = 989.4", "bf16 = 0", "peak_tflops.bf16 must be positive"),
        ("bf16 = 989.4", "bf17 = 1", "unknown key peak_tflops.'bf17'"),
        ("hbm_gib = 80", "hbm_gib = -80", "hbm_gib must be positive"),
        ("hbm_gib = 80", 'hbm_gib = "80"', "hbm_gib must be a number, got '80'"),
        ("hbm_gib = 80", "hbm_gib = nan", "hbm_gib must be positive"),
        ("sms = 132", "sms = 132.5", "sms must be a whole number"),
        ("sms = 132", "sms = true", "sms must be a number"),
        ('compute_capability = "9.0"', "compute_capability = 9.0", "compute_capability must be"),
        ('compute_capability = "9.0"', 'compute_capability = "sm90"', 'look like "9.0"'),
        ('arch = "hopper"', "arch = 3", "arch must be a non-empty string"),
        ("[peak_tflops]\nbf16 = 989.4", "peak_tflops = 989.4", "[peak_tflops] must be"),
    ],
)
def test_bad_values(tmp_path, old, new, expected):
    assert old in GOOD
    assert expected in input_error(write(tmp_path, GOOD.replace(old, new)))


def test_bad_system_files(tmp_path):
    good = (
        'gpu = "h100"\ngpus_per_node = 8\nnvswitch = true\nnvlink_gbps_per_direction = 450\n'
        "nics_per_node = 8\nnic_gbit_s = 400\n"
    )
    system = load_system(write(tmp_path, good, "sys.toml"))
    assert system.gpu.name == "h100-sxm5-80gb" and system.nic_bw == 50e9
    cases = [
        (good.replace("true", "1"), "nvswitch must be true or false"),
        (good.replace('"h100"', '"h1OO"'), "unknown gpu 'h1OO'"),
        (good.replace("nic_gbit_s = 400", "nic_gbit_s = 0"), "nic_gbit_s must be positive"),
        (good.replace("gpus_per_node = 8", "gpus_per_node = 0"), "gpus_per_node must be positive"),
        (good.replace("gpus_per_node = 8", "gpus_per_node = 100000"), "largest NVLink domain"),
        (good + "sms = 3\n", "unknown key 'sms'"),
    ]
    for text, expected in cases:
        assert expected in input_error(write(tmp_path, text, "sys.toml"), load_system)


# ----------------------------------------------------------------------------- base=


def test_base_inherits_and_overrides(tmp_path):
    path = write(
        tmp_path,
        'base = "H100"\nname = "h100-calibrated"\nhbm_bw_gbps = 3000\n'
        "[model]\ngemm_eff = 0.71\nkernel_floor_s = 3e-6\n"
        "[sources]\nmodel.gemm_eff = 'measured with gpuperf calibrate'\n",
    )
    gpu = load_gpu(path)
    h100 = load_gpu("h100")
    assert gpu.name == "h100-calibrated" and gpu.path == path
    assert gpu.hbm_bw == 3000e9 and gpu.peak_flops == h100.peak_flops and gpu.sms == 132
    assert gpu.params.gemm_eff == 0.71 and gpu.params.kernel_floor_s == 3e-6
    assert gpu.params.mem_eff == h100.params.mem_eff  # not overridden: default
    assert gpu.sources["params.gemm_eff"] == "measured with gpuperf calibrate"
    assert gpu.sources["hbm_bw"] == f"set in {path}"
    assert gpu.sources["sms"] == h100.sources["sms"]
    assert "h100-calibrated" not in aliases()  # user files register nothing


def test_base_peak_table_merges_per_dtype(tmp_path):
    gpu = load_gpu(write(tmp_path, 'base = "a100"\n[peak_tflops]\nbf16 = 300\n'))
    assert gpu.peak("bf16") == 300e12 and gpu.peak("tf32") == 156e12
    assert gpu.sources["peak_flops.bf16"].startswith("set in")
    assert gpu.name == "my"


def test_base_chain_by_path_and_cycles(tmp_path):
    write(tmp_path, 'base = "h200"\nsms = 100\n', "a.toml")
    gpu = load_gpu(write(tmp_path, 'base = "a.toml"\nhbm_gib = 100\n', "b.toml"))
    assert (gpu.sms, gpu.hbm_bytes, gpu.hbm_bw) == (100, 100 * 2**30, 4800e9)
    write(tmp_path, 'base = "d.toml"\n', "c.toml")
    write(tmp_path, 'base = "c.toml"\n', "d.toml")
    assert "refers back to itself" in input_error(str(tmp_path / "c.toml"))
    assert "unknown gpu 'h9'" in input_error(write(tmp_path, 'base = "h9"\n'))
    assert "base must be a string" in input_error(write(tmp_path, "base = 3\n"))


def test_system_base_swaps_the_gpu(tmp_path):
    system = load_system(write(tmp_path, 'base = "dgx-h100"\ngpu = "h200"\n'))
    assert system.gpu.name == "h200-sxm-141gb" and system.nic_bw == 50e9
    assert loader.is_system(str(tmp_path / "my.toml"))
    assert loader.is_system("hgx-h100") and not loader.is_system("h100")


def test_every_extra_bound_calibration_may_fit_loads(tmp_path):
    """A profile `gpuperf calibrate` writes at any bound of its [model.extra] parameters loads
    (comm_bw_eff is a ratio to NCCL's model and may pass 1)."""
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.hardware.spec import ModelParams
    from gpuperf.perfmodel.calibrate import OP_PARAMS

    plain = {f for f in ModelParams.__dataclass_fields__}
    extras = [(k, b) for k, b in OP_PARAMS.items() if k not in plain]
    assert extras
    for key, bounds in extras:
        for value in bounds:
            path = tmp_path / f"{key}.toml"
            path.write_text(f'base = "h200"\nname = "x"\n[model.extra]\n{key} = {value!r}\n')
            assert load_gpu(str(path)).params.extra[key] == float(value)


def test_b200_borrows_the_h200s_calibration_and_says_it_is_not_calibrated():
    """params_from: an uncalibrated profile starts from a calibrated one's fitted parameters
    (its own datasheet numbers kept); it is not reported as calibrated."""
    b200, h200 = load_gpu("b200"), load_gpu("h200")
    assert b200.params == h200.params and b200.params_from == "h200-sxm-141gb"
    assert not b200.calibrated and h200.calibrated
    assert b200.hbm_bw == 7700e9 and b200.peak("bf16") == 2250e12


def test_params_from_rules(tmp_path):
    def profile(extra: str) -> str:
        path = tmp_path / "x.toml"
        path.write_text(f'base = "b200"\nname = "x"\n{extra}')
        return str(path)

    # its own [model] table wins over the borrowed one, key by key
    mine = load_gpu(profile('params_from = "h100"\n[model]\ngemm_eff = 0.5\n'))
    assert mine.params.gemm_eff == 0.5
    assert mine.params.mem_eff == load_gpu("h100").params.mem_eff and mine.params_from
    # not inherited through base: a calibration built on the B200 is its own
    assert load_gpu(profile("[model]\ngemm_eff = 0.5\n")).calibrated
    for bad in ('params_from = "l4"\n', 'params_from = "b200"\n', "params_from = 3\n"):
        with pytest.raises(InputError, match="params_from must"):
            load_gpu(profile(bad))


def test_base_model_extra_merges_per_key(tmp_path):
    # a calibrated profile's [model.extra] (what `gpuperf calibrate` writes) adds to its base's
    base = loader.load_gpu("h100").params.extra
    p = tmp_path / "cal.toml"
    p.write_text('base = "h100"\n[model]\nmem_eff = 0.9\n[model.extra]\nhost_pool_factor = 1\n')
    extra = loader.load_gpu(str(p)).params.extra
    assert extra["host_pool_factor"] == 1.0
    assert (
        extra["issue_generic"] == base["issue_generic"]
        and extra["gemm_fp8_eff"] == base["gemm_fp8_eff"]
    )
