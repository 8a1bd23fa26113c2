"""Every trainer renders and reads what it did when the goldens were recorded: the trial
programs, launch files and log parses of tests/trainer_goldens.py, byte for byte. A change
that means to alter one re-records it (`python tests/trainer_goldens.py --write`) and says why
in its commit."""

from __future__ import annotations

import pytest

from trainer_goldens import GOLDENS, everything

RENDERED = everything()
RECORDED = sorted(p.relative_to(GOLDENS).as_posix() for p in GOLDENS.rglob("*") if p.is_file())


def test_the_goldens_cover_every_example_format_and_parser():
    assert sorted(RENDERED) == RECORDED
    assert {name.split("/")[0] for name in RECORDED} == {"programs", "exports", "logs"}


@pytest.mark.parametrize("name", RECORDED)
def test_rendered_as_recorded(name):
    assert RENDERED.get(name) == (GOLDENS / name).read_text(), name
