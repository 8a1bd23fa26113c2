"""Shared by the trainer tests: a rehearsed campaign's winner, a trainer's refusal of a layout,
and the configs torchtitan's own registries build (to check ParaTune's tables of them against
the installed release)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator

from orchestrator.record.campaign import CampaignView
from orchestrator.scheduling.controller import Controller
from orchestrator.campaign_spec.trainer_layouts import runnable

TORCHTITAN_MODULES = ("llama3", "qwen3", "deepseek_v3", "gpt_oss")


def run_and_best(spec):
    """Run a (simulated) campaign to its end; its view and winner."""
    Controller(spec).run()
    view = CampaignView(spec)
    best = view.best(view.records())
    assert best is not None
    return view, best



def one_line_refusal(spec, config, kept) -> str:
    """Why the spec's trainer drops `config`, in one line; `kept`, a layout beside it that the
    trainer runs, shows the refusal is of `config` alone."""
    refused: list[str] = []
    assert runnable(spec, [config, kept], refused) == [kept], refused
    assert len(refused) == 1 and "\n" not in refused[0], refused
    return refused[0]


def torchtitan_registry_configs(modules=TORCHTITAN_MODULES) -> Iterator[tuple[str, str, object]]:
    """(module, registry function name, its config) for every argument-free config function
    torchtitan registers; those that need what this machine lacks are skipped."""
    for module in modules:
        registry = importlib.import_module(f"torchtitan.models.{module}.config_registry")
        for name, function in inspect.getmembers(registry, inspect.isfunction):
            if function.__module__ != registry.__name__ or inspect.signature(function).parameters:
                continue
            try:
                config = function()
            except (ImportError, ValueError):
                continue
            yield module, name, config


def parsed_in_child(script: str, rendered: list[list[str]]) -> list[dict]:
    """`script` run in a child process on the rendered argument lists (a tool's own parser,
    which needs a fresh interpreter): what it printed last, as JSON."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", script, json.dumps(rendered)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])
