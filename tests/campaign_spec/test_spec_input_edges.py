"""Spec input at its edges is read as meant or refused in one line, on the command line and
at the service alike: a FIFO or a device where a YAML file goes is refused, never waited on; a
preset file as a mapping's `preset:` base takes overrides; a section given as null is named;
`1:30` is never the base-60 number 90."""

from __future__ import annotations

import os
import threading

import pytest
from builders import one_line_error
from conftest import EXAMPLES, write_spec
from test_spec_input import B

from orchestrator.common.errors import SpecError
from orchestrator.server.submission import parse_submission, read_submission
from orchestrator.campaign_spec.loading import load_spec
from orchestrator.campaign_spec.yaml_input import parse_yaml

QUICKSTART = (EXAMPLES / "quickstart.yaml").read_text()
MODEL_FILE = ("name: small\nnum_layers: 2\nhidden: 64\nnum_heads: 4\nffn_hidden: 128\n"
              "vocab_size: 256\nseq_len: 16\n")


def without_waiting(call, fifo):
    """`call()`'s answer, given within a minute; one that waits on the FIFO is let go (a writer
    opens and closes it) and fails the test."""
    answer = {}
    thread = threading.Thread(target=lambda: answer.update(result=call()), daemon=True)
    thread.start()
    thread.join(timeout=60)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(timeout=60)
        pytest.fail(f"waited on the FIFO {fifo}")
    return answer["result"]


@pytest.mark.parametrize("command", [["run"], ["estimate"], ["run", "--dry-run"],
                                     ["submit", "--server", "http://127.0.0.1:9"]])
def test_a_fifo_as_the_spec_is_refused_not_waited_on(cli, tmp_path, runs_dir, command):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    err = one_line_error(without_waiting(lambda: cli(*command, str(fifo)), fifo), "a FIFO")
    assert str(fifo) in err


def test_a_fifo_as_a_preset_file_is_refused_not_waited_on(cli, tmp_path, runs_dir):
    fifo = tmp_path / "model.yaml"
    os.mkfifo(fifo)
    spec = write_spec(tmp_path / "s.yaml", tracking={"enabled": False})
    result = without_waiting(lambda: cli("run", str(spec), "--dry-run", "--set",
                                         f"model={fifo}"), fifo)
    one_line_error(result, "model", "a FIFO")


def test_a_device_as_the_spec_is_refused(cli, runs_dir):
    one_line_error(cli("run", "/dev/zero"), "/dev/zero", "a device")


@pytest.mark.parametrize("where", ["cli", "service"])
def test_a_preset_file_base_takes_overrides(tmp_path, runs_dir, where):
    model_file = tmp_path / "small.yaml"
    model_file.write_text(MODEL_FILE)
    override = f"model={{preset: {model_file}, seq_len: 32}}"
    if where == "cli":
        spec = load_spec(write_spec(tmp_path / "s.yaml"), [override])
    else:
        spec = parse_submission(read_submission(QUICKSTART, [override]), tmp_path / "runs",
                                str(tmp_path))
    assert (spec.model.name, spec.model.hidden, spec.model.seq_len) == ("small", 64, 32)


def test_a_section_given_as_null_is_one_line(cli, tmp_path, runs_dir):
    spec = write_spec(tmp_path / "s.yaml", tracking={"enabled": False})
    one_line_error(cli("run", str(spec), "--dry-run", "--set", "trial=null"),
                   "trial: empty (null)", "leave it out")
    for text, overrides in ((QUICKSTART, ["trial=null"]), (B + "trial:\n", []),
                            (QUICKSTART, ["trial.env=null"])):
        with pytest.raises(SpecError, match=r"trial(\.env)?: empty \(null\)"):
            parse_submission(read_submission(text, overrides), tmp_path / "runs", str(tmp_path))


def test_no_number_is_read_in_base_60(cli, spec_file, runs_dir, tmp_path):
    assert parse_yaml("1:30") == "1:30" and parse_yaml("1:30.5") == "1:30.5"
    one_line_error(cli("run", spec_file(B), "--dry-run", "--set", "budget.max_trials=1:30"),
                   "budget.max_trials", "'1:30'")
    one_line_error(cli("run", spec_file(B + "budget: {max_trials: 1:30}\n"), "--dry-run"),
                   "budget.max_trials", "'1:30'")
    spec = load_spec(spec_file(B), ["trial.env.WHEN=1:30"])
    assert spec.trial.env["WHEN"] == "1:30"
    with pytest.raises(SpecError, match="budget.max_trials"):
        parse_submission(read_submission(QUICKSTART, ["budget.max_trials=1:30"]),
                         tmp_path / "runs", str(tmp_path))


def test_a_campaigns_saved_spec_is_never_read_through_a_link(cli, tmp_path, runs_dir):
    """A campaign's folder belongs to whoever runs its trials; its spec.yaml swapped for a link
    to a file only its reader (the service, as root) may read is refused in one line, and the
    file's text is not shown."""
    spec = write_spec(tmp_path / "s.yaml", name="linked", backend={"kind": "simulated"},
                      budget={"max_trials": 1}, tracking={"enabled": False})
    assert cli("run", str(spec))[0] == 0
    secret = tmp_path / "root-only.yaml"
    secret.write_text("name: linked\nS3cretPW2: 1\n")
    saved = runs_dir / "linked" / "spec.yaml"
    saved.unlink()
    saved.symlink_to(secret)
    code, out, err = cli("status", "linked")
    assert "S3cretPW2" not in out + err
    one_line_error((code, out, err), "symbolic link")
