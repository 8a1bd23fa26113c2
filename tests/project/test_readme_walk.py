"""The README's quickstart walk, command by command as printed, after a campaign started the way
`make demo` starts one (named `quickstart-<date-time>` by the Makefile): each command exits 0
and `status`, `best`, `report` and `ui` find the demo's campaign. Kept cheap: the demo campaign
runs two trials on the simulated backend; the block's own `run` (real trials) is what the demo
campaign stands for, and `ui` stops short of starting the MLflow server."""

from __future__ import annotations

import os
import re
import shlex
import time

import pytest
from conftest import ROOT

from orchestrator.cli import main, reports

CHEAP = ["--set", "backend.kind=simulated", "--set", "budget.max_trials=2"]


def readme_block() -> list[list[str]]:
    """The `paratune` commands of the README's quickstart block, comments cut."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [shlex.split(line, comments=True) for line in block.splitlines()]
    return [c for c in commands if c and c[0] == "paratune"]


def demo_command() -> tuple[list[str], str]:
    """`make demo`'s `paratune run` with its campaign name, made from the Makefile's DEMO_NAME."""
    makefile = (ROOT / "Makefile").read_text()
    prefix, stamp = re.search(r"^DEMO_NAME := (\S+?)\$\(shell date \+(\S+)\)$", makefile,
                              re.M).groups()
    name = prefix + time.strftime(stamp)
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    run = next(line for line in recipe.splitlines() if "paratune run " in line)
    args = shlex.split(run.split("paratune", 1)[1].replace("$(DEMO_NAME)", name))
    return args, name


@pytest.fixture
def walk(tmp_path, monkeypatch):
    """A folder like the repository's root, with no runs yet: examples/ and the runs folder."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PARATUNE_RUNS_DIR", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("PARATUNE_SERVER", raising=False)
    return tmp_path


def test_the_readme_quickstart_walk_works_after_the_demo(walk, monkeypatch, capsys):
    demo, name = demo_command()
    assert main([*demo, *CHEAP]) == 0
    capsys.readouterr()
    served: list = []
    monkeypatch.setattr(reports, "announce_when_up", lambda server, links: served.append(links))
    commands = readme_block()
    assert {c[1] for c in commands} >= {"run", "status", "best", "report", "ui"}
    for command in commands:
        args = command[1:]
        if args[0] == "run" and "--dry-run" not in args:
            assert args[1] == demo[1]  # the demo ran this spec: its campaign stands for it
            continue
        with monkeypatch.context() as patch:
            if args[0] == "ui":  # what the MLflow server would start with, not the server
                patch.setattr(os, "execve", lambda path, argv, env: served.append(argv))
                patch.setattr(os, "dup2", lambda fd, fd2: None)
            code = main(args)
        out, err = capsys.readouterr()
        assert code == 0, f"{shlex.join(command)}: {err}"
        if args[0] in ("status", "best", "report", "ui"):
            assert name in err, f"{shlex.join(command)} does not say it took {name}: {err}"
    assert (walk / "launch.sh").is_file()
    assert (walk / "runs" / name / "report.html").is_file()
    links, argv = served
    assert [campaign for campaign, _ in links] == ["MLflow UI", name]
    assert argv[1:4] == ["-m", "mlflow", "ui"]
