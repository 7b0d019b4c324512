"""The bad-input and silent-option sweep of the ux-fixes branch, one named case each, run through
the CLI's entry point: a group without a subcommand prints its help; options that were ignored
or accepted without meaning are refused in one line (exit 2)."""

from __future__ import annotations

import pytest
from clirun import run


def refused(capsys, *args: str, match: str = "") -> str:  # noqa: ANN001
    code, out, err = run(capsys, *args)
    assert code == 2, (args, code, err[-2000:])
    assert err.count("\n") == 1 and err.startswith("gpuperf: error: "), err
    assert match in err, err
    return err


@pytest.mark.parametrize("group", [(), ("hw",), ("models",), ("measure",), ("predict",)])
def test_a_group_without_a_subcommand_prints_its_help(capsys, group):
    code, out, err = run(capsys, *group)
    assert (code, err) == (0, ""), err[:300]
    assert out.startswith(f"Usage: gpuperf {' '.join(group)}".rstrip() + " ")
    assert "\nCommands:\n" in out  # the help as -h prints it, one line per subcommand
    assert run(capsys, *group, "--help") == (0, out, "")
