"""README.md's list of presets names every model and cluster preset the code has, and no other,
so a preset added to orchestrator/presets/ cannot go unlisted."""

from __future__ import annotations

import re

from conftest import ROOT

from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS


def _listed() -> tuple[set[str], set[str]]:
    """The backticked names of the README's "Presets:" paragraph: models, then clusters."""
    text = (ROOT / "README.md").read_text()
    paragraph = re.search(r"^Presets: models (.*?)\n\n", text, re.S | re.M).group(1)
    models, clusters = paragraph.split("; clusters ", 1)
    names = re.compile(r"`([a-z0-9.-]+)`")  # a preset name, not a path
    return set(names.findall(models)), set(names.findall(clusters))


def test_the_readme_lists_every_preset():
    models, clusters = _listed()
    assert clusters == set(CLUSTER_PRESETS)
    assert models == set(MODEL_PRESETS)
