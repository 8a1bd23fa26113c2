"""The `paratune` command line. Bad input is one line on stderr and exit code 2, never a traceback.

Each command is a plain function in one of the command modules (campaigns, cost_model,
calibrate, reports, and remote: the ones that may go through the campaign service); this
module registers them on the Typer app. `status`, `best`, `plan`, `estimate`, `calibrate`,
`submit`, `ls`, `cancel` and `trainers` take `--json` and then print exactly one JSON object on stdout.
An interrupt exits with 130, a controller detached by SIGTERM with 143 (128 + the signal, as a
shell reports it).
"""

from __future__ import annotations

import errno
import functools
import logging

import click
import typer

from orchestrator.cli import (
    calibrate,
    campaigns,
    cost_model,
    profile,
    remote,
    reports,
    service_grants,
    trainers,
)
from orchestrator.cli.common import console
from orchestrator.cli.service import server_app
from orchestrator.common.errors import UserError, one_line
from orchestrator.scheduling.signals import Detached, Interrupted

# Typer 0.29 and later raise their own usage errors and aborts (under typer.TyperException and
# typer.Abort); earlier releases raise click's.
_TYPER_ERRORS = (typer.TyperException,) if hasattr(typer, "TyperException") else ()
USAGE_ERRORS = (click.exceptions.UsageError, *_TYPER_ERRORS)
ABORTS = (click.exceptions.Abort, typer.Abort, KeyboardInterrupt)
# A full disk or a file that may not be written: one line, like any other error a user fixes.
STORAGE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG)

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    help="Find the fastest parallelism and sharding for training an LLM on a cluster.",
)
for command in (campaigns.run, campaigns.resume, remote.status, remote.best,
                cost_model.plan, cost_model.estimate, calibrate.calibrate, profile.profile,
                reports.report, reports.ui, remote.submit, remote.ls, remote.cancel, remote.logs,
                trainers.trainers):
    app.command()(command)
server_app.command("grant")(service_grants.grant)
server_app.command("member")(service_grants.member)
app.add_typer(server_app, name="server")


@functools.lru_cache(maxsize=1)
def _command() -> click.Command:
    """The click command Typer builds from the app: built once, not on every call."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="paratune: %(message)s")
    try:
        code = _command().main(args=argv, prog_name="paratune", standalone_mode=False)
    except UserError as exc:
        console.print(one_line(f"error: {exc}"), markup=False, highlight=False, soft_wrap=True)
        return 2
    except USAGE_ERRORS as exc:
        console.print(one_line(f"error: {exc.format_message()}"), markup=False, highlight=False,
                      soft_wrap=True)
        return 2
    except OSError as exc:
        if exc.errno not in STORAGE_ERRORS:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        console.print(one_line(f"error: {where}{exc.strerror}; what is recorded stays: free "
                               "space or fix permissions, then run the command again"),
                      markup=False, highlight=False, soft_wrap=True)
        return 2
    except Detached as exc:  # SIGTERM: the trials run on
        console.print(f"detached; continue with `paratune resume {exc.campaign}`", markup=False,
                      highlight=False)
        return 143
    except Interrupted as exc:
        console.print(f"interrupted; continue with `paratune resume {exc.campaign}`"
                      if exc.campaign else "interrupted before the campaign was saved; "
                      "nothing to resume", markup=False, highlight=False)
        return 130
    except ABORTS:
        code = 130
    if code == 130:  # an interrupt, which Typer turns into this exit code
        console.print("interrupted", markup=False)
        return 130
    return code if isinstance(code, int) else 0
