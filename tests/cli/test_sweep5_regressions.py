"""The fifth sweep (hostile inputs and invariants, 2026-11-25, a later session), one named case
each: a closed stdout, an elementwise fn that is not a string."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuperf import api
from gpuperf.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def test_a_closed_stdout_is_one_line_and_exit_3_not_a_traceback():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args in (["predict", "llama2-7b", "--format", "json"], ["hw", "list"]):
        cmd = [sys.executable, "-m", "gpuperf", *args]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                              cwd=ROOT, timeout=120, close_fds=True,
                              preexec_fn=lambda: os.close(1))  # fmt: skip
        err = done.stderr.decode()
        assert done.returncode == 3, (args, err)
        assert err == "gpuperf: error: cannot write the output: standard output is closed\n"


@pytest.mark.parametrize("fn", [[1], {}, set(), 3])
def test_an_elementwise_fn_that_is_not_a_name_is_an_input_error(fn):
    with pytest.raises(InputError, match="unknown elementwise fn"):
        api.predict_op("elementwise", gpu="h100", fn=fn, numel=1024)
