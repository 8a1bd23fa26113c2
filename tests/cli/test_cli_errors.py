"""Usage errors (an unknown command or option, a missing argument, a value out of range) are
one line on stderr and exit code 2, in whichever exception family the installed Typer raises."""

from __future__ import annotations

import pytest
from conftest import run_cli_process


@pytest.mark.parametrize("args,message", [
    (["service"], "No such command 'service'"),
    (["run"], "Missing argument"),
    (["status", "--bogus"], "No such option: --bogus"),
    (["profile", "--gpus", "two"], "Invalid value for '--gpus'"),
    (["calibrate", "c", "--cluster"], "'--cluster' requires an argument"),
])
def test_usage_errors_are_one_line(cli, args, message):
    code, out, err = cli(*args)
    assert code == 2 and message in err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_a_usage_error_in_a_real_process_is_one_line():
    proc = run_cli_process("no-such-command")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error: No such command")


def test_help_exits_zero(cli):
    code, out, _ = cli("--help")
    assert code == 0 and "profile" in out
