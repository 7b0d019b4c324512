"""Property-based: the files users point gpuperf at, with hostile values. A config.json with
strings for numbers, "false" for bools, 1e12 layers, nested JSON or bytes that are not UTF-8; a
profile .toml on a built-in base with sustained_clock_frac 0 or 50, negative bandwidth, 400-digit
integers or markup; results files with hostile rows for report --from/--measured and calibrate
--from. Each is used, shown or refused as hostile.check_cli requires, and a command that writes a
file leaves it whole (a report ending in </html>, a profile that loads) or absent."""

from __future__ import annotations

import contextlib
import copy
import json
import math
from pathlib import Path

from hostile import VALUES, check_cli, examples, folder
from hypothesis import given
from hypothesis import strategies as st

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "h100-sxm5-80gb"

NESTED = json.loads("[" * 100 + "]" * 100)
JSON_VALUES = st.one_of(
    st.sampled_from(["abc", "false", "true", "", "256", "[/x] [bold]", "\x1b[31m\x1b]0;t\x07",
                     "gpt2", "gpt_neox", "mixtral", "llama", None, True, False, [], {}, [4],
                     {"a": 1}, 1e12, 7.5, 0, -1, 2**31, 2**63, 10**400, 1e308, math.inf,
                     -math.inf, math.nan, NESTED, "a" * 300, "/dev/zero", "..", "\n"]),
    st.integers(-(2**66), 2**66),
    st.floats(),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=8),
)  # fmt: skip
TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
        "vocab_size": 1000, "max_position_embeddings": 2048}  # fmt: skip
CONFIG_KEYS = [*TINY, "head_dim", "tie_word_embeddings", "rope_theta", "attention_bias",
               "mlp_bias", "num_local_experts", "num_experts", "num_experts_per_tok",
               "attention_dropout", "_name_or_path", "n_embd", "n_layer", "n_head", "n_inner",
               "n_positions", "use_parallel_residual", "rotary_emb_base", "attn_pdrop",
               "resid_pdrop", "hidden_dropout"]  # fmt: skip
MODEL_COMMANDS = [
    ["predict", "{f}", "--gpu", "h100", "--seq", "128"],
    ["predict", "{f}", "--mode", "train", "--system", "dgx-h100", "--tp", "2", "--seq", "128",
     "--format", "json"],
    ["models", "show", "{f}"],
    ["models", "show", "{f}", "--format", "json"],
]  # fmt: skip


def _fill(template: list[str], path: Path) -> list[str]:
    return [a.replace("{f}", str(path)) for a in template]


@examples(120)
@given(
    base=st.sampled_from([TINY, {**TINY, "model_type": "mixtral", "num_local_experts": 4,
                                 "num_experts_per_tok": 2}, {**TINY, "model_type": "gpt2"}]),
    edits=st.dictionaries(st.sampled_from(CONFIG_KEYS), JSON_VALUES, min_size=1, max_size=3),
    garble=st.one_of(st.none(), st.binary(min_size=1, max_size=4)),
    command=st.sampled_from(MODEL_COMMANDS),
)  # fmt: skip
def test_hostile_config_json(base, edits, garble, command):
    """A config.json with strings for numbers, "false" for bools, 1e12 layers, nested JSON,
    non-UTF-8 bytes: predicted, shown, or refused in one line."""
    text = json.dumps({**base, **edits}).encode()
    if garble is not None:  # bytes spliced into the text: invalid JSON or UTF-8, or neither
        text = text[: len(text) // 2] + garble + text[len(text) // 2 :]
    with folder() as d:
        f = d / "config.json"
        f.write_bytes(text)
        check_cli(_fill(command, f))


TOML_VALUES = st.one_of(
    st.sampled_from(["0", "-1", "50", "1e400", "inf", "nan", "-inf", "true", '"abc"', '""',
                     "[]", "{}", '"\\u001b[31m"', '"[/x] [bold]"', "1e-300", "1" + "0" * 400,
                     "0.5", "1", "[1, 2]", "{a = 1}", '"h100"', '"h100-sxm5-80gb"', '"9.0"',
                     '["[/x]"]', '"/dev/zero"', '"."', "-0.0", "2147483648", "576", "577"]),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)  # fmt: skip
GPU_KEYS = ["sms", "boost_clock_mhz", "hbm_gib", "hbm_bw_gbps", "l2_mib", "smem_per_sm_kib",
            "nvlink_gbps_per_direction", "pcie_gbps_per_direction", "display_name", "arch",
            "compute_capability", "aliases", "nvml_names", "name", "base", "peak_tflops.bf16",
            "peak_tflops.fp8", "peak_tflops.fp32", "peak_tflops.fp4", "model.sustained_clock_frac",
            "model.gemm_eff", "model.mem_eff", "model.kernel_floor_s", "model.host_dispatch_s",
            "model.bw_sm_frac", "model.l2_usable_frac", "model.gemm_fill_ksteps",
            "model.attn_fill_blocks", "model.bytes_for_half_bw", "model.extra.x", "sources.sms",
            "sources.peak_tflops", "model.nope"]  # fmt: skip
SYSTEM_KEYS = ["gpu", "gpus_per_node", "nvswitch", "nvlink_gbps_per_direction", "nics_per_node",
               "nic_gbit_s", "display_name", "base", "aliases",
               "sources.gpus_per_node"]  # fmt: skip
GPU_COMMANDS = [
    ["hw", "show", "{f}"],
    ["hw", "show", "{f}", "--format", "json"],
    ["predict", "llama2-7b", "--gpu", "{f}", "--seq", "128"],
    ["predict", "gemm", "1K:8K:x2", "--gpu", "{f}"],
    ["predict", "allreduce", "--bytes", "1K:1G:x32", "--gpu", "{f}", "--nproc", "4"],
]
SYSTEM_COMMANDS = [
    ["hw", "show", "{f}"],
    ["predict", "allreduce", "--bytes", "1K:1G:x32", "--system", "{f}", "--nodes", "2"],
    ["predict", "llama3-8b", "--system", "{f}", "--tp", "2", "--seq", "128"],
    ["search", "llama3-8b", "--system", "{f}", "--gpus", "8", "--global-batch", "64",
     "--seq", "1024"],
]  # fmt: skip


def _toml(base: str, edits: dict[str, str]) -> str:
    """TOML text: base = ..., then the edits (dotted keys become tables)."""
    tables: dict[str, list[str]] = {"": [f'base = "{base}"']}
    for key, value in edits.items():
        table, _, name = key.rpartition(".")
        tables.setdefault(table, []).append(f"{name} = {value}")
    lines = tables.pop("")
    for table, rows in tables.items():
        lines += [f"[{table}]", *rows]
    return "\n".join(lines) + "\n"


@examples(120)
@given(
    system=st.booleans(),
    edits=st.dictionaries(st.sampled_from(GPU_KEYS), TOML_VALUES, min_size=1, max_size=3),
    sys_edits=st.dictionaries(st.sampled_from(SYSTEM_KEYS), TOML_VALUES, min_size=1, max_size=3),
    pick=st.integers(0, 10),
)
def test_hostile_profiles(system, edits, sys_edits, pick):
    """A profile .toml on a built-in base with hostile values (sustained_clock_frac 0 or 50,
    negative bandwidth, 400-digit integers, markup in display_name): shown, used, or refused."""
    with folder() as d:
        f = d / "p.toml"
        if system:
            f.write_text(_toml("dgx-h100", sys_edits))
            command = SYSTEM_COMMANDS[pick % len(SYSTEM_COMMANDS)]
        else:
            f.write_text(_toml("h100-sxm5-80gb", edits))
            command = GPU_COMMANDS[pick % len(GPU_COMMANDS)]
        code, out = check_cli(_fill(command, f))
    if code == 0 and "display_name" in (sys_edits if system else edits) and command[0] == "hw":
        shown = (sys_edits if system else edits)["display_name"]
        if shown == '"[/x] [bold]"':
            assert "[/x] [bold]" in out  # markup printed as written, not interpreted


def _results_template() -> dict:
    """A small results file: one gemm, one elementwise, one attention row of the committed H100
    files, without their raw samples."""
    rows = []
    for name in ("gemm.json", "relu.json", "attention.json"):
        data = json.loads((RESULTS / name).read_text())
        row = dict(data["rows"][0])
        row.pop("samples_ms", None)
        rows.append(row)
    env = {k: data["env"][k] for k in ("gpu", "device", "timing_method", "sms")}
    return {"env": env, "kind": "mixed", "rows": rows, "skipped": []}


RESULTS_TEMPLATE = _results_template()
E2E_TEMPLATE = {
    "env": RESULTS_TEMPLATE["env"],
    "runs": json.loads((RESULTS / "e2e_hf_run1.json").read_text())["runs"][:1],
}
RESULT_PATHS = ["rows", "rows.0", "rows.0.op", "rows.0.op.type", "rows.0.op.m", "rows.0.op.dtype",
                "rows.0.measured_ms", "rows.0.name", "rows.0.kind", "rows.0.dtype", "rows.0.flops",
                "rows.1.op.numel", "rows.1.op.fn", "rows.1.measured_ms", "rows.1.p10_ms",
                "rows.2.op.q_len", "rows.2.op.causal", "rows.2.op.kv_heads", "env", "env.gpu",
                "env.sms", "kind", "skipped", "gpu", "host"]  # fmt: skip
E2E_PATHS = ["runs", "runs.0", "runs.0.config", "runs.0.config.hidden_size", "runs.0.scenario",
             "runs.0.scenario.seq", "runs.0.scenario.mode", "runs.0.measured_ms", "runs.0.model",
             "runs.0.config.tie_word_embeddings", "env", "launch"]  # fmt: skip


def _set(doc: dict, path: str, value: object) -> None:
    *parents, last = path.split(".")
    node: object = doc
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]  # type: ignore[index]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value  # type: ignore[index]


RESULT_COMMANDS = [
    ["report", "--from", "{f}", "-o", "{o}.html"],
    ["report", "--from", "{f}", "--gpu", "h100", "-o", "{o}.html"],
    ["report", "llama2-7b", "--seq", "128", "--measured", "{f}", "-o", "{o}.html"],
    ["calibrate", "--from", "{f}", "--gpu", "h100", "--all-shapes", "-o", "{o}.toml"],
]


@examples(30)
@given(
    e2e=st.booleans(),
    edits=st.lists(st.tuples(st.integers(0, 100), JSON_VALUES), min_size=1, max_size=2),
    command=st.sampled_from(RESULT_COMMANDS),
    out_name=st.sampled_from(["out", "[/x] o", "é ü", "-o", "sub/dir/out"]),
)  # fmt: skip
def test_hostile_results_files(e2e, edits, command, out_name):
    """report --from / --measured and calibrate --from a results file with hostile rows: a whole
    output (a report that ends in </html>, a profile that loads) or none, and no temporary."""
    doc = copy.deepcopy(E2E_TEMPLATE if e2e else RESULTS_TEMPLATE)
    paths = E2E_PATHS if e2e else RESULT_PATHS
    for i, value in edits:
        with contextlib.suppress(KeyError, IndexError, TypeError, ValueError):
            _set(doc, paths[i % len(paths)], value)  # a path an earlier edit removed is skipped
    with folder() as work:
        f = work / ("e2e_run.json" if e2e else "results.json")
        f.write_text(json.dumps(doc))
        argv = [a.replace("{f}", str(f)).replace("{o}", str(work / out_name)) for a in command]
        out = Path(argv[-1])
        code, _ = check_cli(argv, out_dir=out.parent)
        if code:
            assert not out.exists(), argv
        elif out.suffix == ".html":
            assert out.read_text().rstrip().endswith("</html>")
        else:
            from gpuperf.hardware.loader import load_gpu

            assert load_gpu(str(out)).name  # the written profile is one gpuperf reads back


@examples(20)
@given(seq=VALUES, out_name=st.sampled_from(["r.html", "[/x].html", "é.html", "a" * 300]))
def test_report_output_is_whole_or_absent(seq, out_name):
    with folder() as d:
        out = d / out_name
        argv = ["report", "llama2-7b", "--gpu", "h100", "--seq", seq, "-o", str(out)]
        code, _ = check_cli(argv, out_dir=d)
        assert code in (0, 2)
        if code == 0:
            assert out.read_text().rstrip().endswith("</html>")
        else:
            assert list(d.iterdir()) == [], argv  # nothing written, not even a temporary
