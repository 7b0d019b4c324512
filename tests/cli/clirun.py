"""Running the CLI in-process, as the CLI tests do: gpuperf.cli.main with these arguments."""

from __future__ import annotations

from gpuperf.cli import main


def run(capsys, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `gpuperf ARGS`; a run that returns is exit 0."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(capsys, *args: str, match: str = "") -> str:  # noqa: ANN001
    """Run; assert exit 2 with one "gpuperf: error:" line containing `match`; the error."""
    code, out, err = run(capsys, *args)
    assert code == 2, (args, code, err[-2000:])
    assert err.count("\n") == 1 and err.startswith("gpuperf: error: "), err
    assert match in err, err
    return err
