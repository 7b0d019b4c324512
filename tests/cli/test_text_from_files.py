"""Text that comes from files (a config's name, a profile's display_name) is printed as written:
rich markup in it is not interpreted (it raised MarkupError or vanished) and control characters
are dropped (an ESC from a file reached the terminal as an escape sequence)."""

from __future__ import annotations

import json

import pytest
from clirun import run

HOSTILE = "[/x] oops [bold]b \x1b[2J"


@pytest.fixture
def files(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000,
           "_name_or_path": "[red]m[bold] \x1b]0;title\x07"}  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    esc = HOSTILE.replace("\x1b", "\\u001b")  # TOML takes the escape, not the raw byte
    (tmp_path / "p.toml").write_text(f'base = "h100-sxm5-80gb"\ndisplay_name = "{esc}"\n')
    return tmp_path


@pytest.mark.parametrize(
    "args",
    [("predict", "{d}/c.json", "--gpu", "{d}/p.toml"), ("hw", "show", "{d}/p.toml"),
     ("models", "show", "{d}/c.json")],
)  # fmt: skip
def test_names_from_files_print_as_written(capsys, files, args):
    code, out, err = run(capsys, *(a.format(d=files) for a in args))
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    if args[0] == "hw":
        assert "[/x] oops [bold]b [2J" in out  # markup literal, the ESC gone
    else:
        assert "[red]m[bold] ]0;title" in out
