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
