"""The measured corpus in benchmarks/measured/ is whole (the README's 1,588 rows from 11
sources, each row naming its source) and every row has its one role, fit or check, fixed by
source before any figure is scored (benchmarks/measured_corpus.py)."""

from __future__ import annotations

import re
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import measured_corpus  # noqa: E402


def test_every_published_row_is_in_the_corpus_with_its_source():
    readme = (measured_corpus.FOLDER / "README.md").read_text()
    published = int(re.search(r"^([\d,]+) measurements", readme, re.M).group(1).replace(",", ""))
    table = dict(re.findall(r"^\| (\S+\.csv) \| (\d+) \|", readme, re.M))
    every = measured_corpus.rows()
    assert len(every) == published == 1588
    by_file = {f: sum(r.file == f for r in every) for f in table}
    assert by_file == {f: int(n) for f, n in table.items()}
    assert all(r.values["source"].strip() for r in every)


def test_each_row_has_one_role_and_no_fit_row_checks():
    fit, check = measured_corpus.rows("fit"), measured_corpus.rows("check")
    superseded = measured_corpus.rows("superseded")
    assert len(fit) + len(check) + len(superseded) == len(measured_corpus.rows())
    assert {r.file for r in fit} == {"megatron_lm_readme.csv"}
    assert not {(r.file, r.number) for r in fit} & {(r.file, r.number) for r in check}


def test_a_source_without_a_role_is_refused(tmp_path, monkeypatch):
    (tmp_path / "new_source.csv").write_text("model,source\nx,somewhere\n")
    monkeypatch.setattr(measured_corpus, "FOLDER", tmp_path)
    with pytest.raises(KeyError, match="new_source.csv"):
        measured_corpus.rows()


def test_a_landscapes_calibration_rows_are_its_first_in_file_order():
    dlperf = [r for r in measured_corpus.rows("check") if r.file == "dlperf_gpt_v100.csv"]
    fitted, scored = measured_corpus.calibration_rows(list(reversed(dlperf)), 5)
    assert [r.number for r in fitted] == [1, 2, 3, 4, 5]
    assert len(scored) == len(dlperf) - 5 and min(r.number for r in scored) == 6
