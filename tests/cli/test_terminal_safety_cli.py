"""Text from files reaches the terminal as text: rich markup in it prints literally and its
control characters (ESC, BEL, CSI...) are dropped, by the one Console every command prints with
(reports.console) — whatever the string: a config's _name_or_path, a profile's name and
display_name, a `[model.extra]` key, a system's name. rich's own colours are unaffected."""

from __future__ import annotations

import io
import json

import pytest
from clirun import run

from gpuperf.reports.console import console

CONTROLS = ("\x1b", "\x07", "\x9b", "\x00")


@pytest.fixture
def files(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000,
           "_name_or_path": "org/[bold]cfg\x1b[31m[red]\x07"}  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    # TOML spells the control characters as escapes (a raw one is a TOML error)
    (tmp_path / "p.toml").write_text(
        'base = "h100-sxm5-80gb"\n'
        'name = "[bold]gpu\\u001b[31m-x"\n'
        'display_name = "[/x] oops \\u001b]0;title\\u0007[italic]"\n'
        '[model.extra]\n"key\\u001b[2J" = 1.0\n'
    )
    return tmp_path


def _clean(out: str) -> None:
    for ch in CONTROLS:
        assert ch not in out, repr(ch)


def test_predict_title_prints_config_and_profile_names_as_written(capsys, files):
    code, out, err = run(capsys, "predict", f"{files}/c.json", "--gpu", f"{files}/p.toml")
    assert code == 0, err
    _clean(out)
    assert "[bold]cfg[31m[red] · prefill" in out  # _name_or_path: markup literal, ESC/BEL gone
    assert "on [bold]gpu[31m-x" in out  # the profile's name


def test_hw_show_prints_display_name_and_extra_keys_as_written(capsys, files):
    code, out, err = run(capsys, "hw", "show", f"{files}/p.toml")
    assert code == 0, err
    _clean(out)
    assert "[/x] oops ]0;title[italic]" in out and "[bold]gpu[31m-x" in out
    assert "model.extra.key[2J" in out  # a key of the file, not only its names


def test_models_show_and_search_print_the_config_name_as_written(capsys, files):
    code, out, err = run(capsys, "models", "show", f"{files}/c.json")
    assert code == 0, err
    _clean(out)
    assert "[bold]cfg[31m[red]" in out
    code, out, err = run(
        capsys, "search", f"{files}/c.json", "--system", "dgx-h100", "--gpus", "8",
        "--global-batch", "8", "--seq", "128",
    )  # fmt: skip
    assert code == 0, err
    _clean(out)
    assert "[bold]cfg[31m[red] on 8 GPUs" in out


def test_the_console_drops_controls_from_any_text_and_keeps_its_own_colours():
    from rich.table import Table
    from rich.text import Text

    buf = io.StringIO()
    con = console(file=buf, force_terminal=True, width=80, color_system="standard")
    table = Table(title="t\x1b[2J[bold]")
    table.add_column("op\x07")
    table.add_row("a\x1b]0;x\x07b")
    con.print(table)
    con.print(Text("warn\x9b1m", style="red"), "[/x]")
    out = buf.getvalue()
    assert "\x1b[2J" not in out and "\x07" not in out and "\x9b" not in out and "\x1b]" not in out
    assert "t[2J[bold]" in out and "a]0;xb" in out and "warn1m" in out and "[/x]" in out
    assert "\x1b[31m" in out  # rich's red, rendered as an escape sequence: styles still work
