"""A trainer is one folder that registers with one line: a trainer written in a temporary module,
and registered at run time, is accepted by the spec, refused where its capabilities say, priced
by the cost model with its own runtime and exported in its own format, with no other file
changed. The built-in trainer's bucket refusal is one of those capabilities."""

from __future__ import annotations

import textwrap

import pytest
from builders import layout, make_spec

from orchestrator.common.errors import SpecError
from orchestrator.costmodel.zero_engine import ZeroEngine
from orchestrator.export import export, formats, own_format
from orchestrator.campaign_spec.planning import cost_model_for
from orchestrator.campaign_spec.trainer_layouts import layout_refusal
from orchestrator.trainers.registry import adapter, names, register, trainer_for, unregister

TOY = textwrap.dedent('''
    """A toy trainer: its flags, its refusal, its runtime and its own launch-file format."""

    from orchestrator.costmodel.zero_engine import ZeroEngine
    from orchestrator.trainers.base import LogMetrics, TrainerAdapter, TrainerRun

    REASON = "toy: precision {p}: the toy's GEMMs are bf16 only (toy/README, section 2)"


    def flags(config):
        return [f"--tp={config.tp}", f"--pp={config.pp}", f"--dp={config.dp}"]


    class ToyTrainer(TrainerAdapter):
        name = "toy"
        tool = "toy 1.0"
        runtime = ZeroEngine(zero_engine="torch", ddp_overlaps=False, grads_once_per_step=False)
        export_formats = ("toy-flags", "torchrun", "sbatch")

        def run(self, spec, config, trial_id, folder, steps):
            return TrainerRun(program=["toy.py", *flags(config)], launcher="torchrun")

        def parse_log(self, text):
            return LogMetrics()

        def check_spec(self, spec):
            if 3 in spec.space.zero_stage:
                return ["space.zero_stage: toy has no ZeRO stage 3 (toy/README); use [0, 1, 2]"]
            return []

        def layout_refusal(self, spec, config):
            if config.precision != "bf16":
                return REASON.format(p=config.precision) + "; set space.precision to [bf16]"
            return None

        def exporters(self):
            return {"toy-flags": lambda spec, trial_id, config, trial_dir=None:
                    " ".join(flags(config)) + "\\n"}
''')


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy trainer, in a module of its own, registered for the test's length."""
    (tmp_path / "toy_trainer.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    register("toy", "toy_trainer:ToyTrainer")
    yield
    unregister("toy")


def test_an_unregistered_trainer_is_refused_in_one_line_naming_the_registered_ones():
    with pytest.raises(SpecError) as caught:
        make_spec(trainer="toy")
    message = str(caught.value)
    assert "trial.trainer" in message and "unknown trainer 'toy'" in message
    assert "builtin" in message and "torchtitan" in message and "Traceback" not in message


def test_a_registered_trainer_is_accepted_refused_priced_and_exported_by_its_own_hooks(toy):
    assert "toy" in names()
    spec = make_spec({"space": {"precision": ["bf16", "fp8-tensorwise"], "tp": [2],
                                "zero_stage": [1]}}, trainer="toy")
    assert type(trainer_for(spec)).__name__ == "ToyTrainer"

    # Its capabilities: the spec drops the layouts it refuses, with its reason and source.
    fp8 = layout(precision="fp8-tensorwise")
    assert layout_refusal("toy", spec, fp8) == (
        "toy: precision fp8-tensorwise: the toy's GEMMs are bf16 only (toy/README, section 2); "
        "set space.precision to [bf16]")
    assert {c.precision for c in spec.candidates()} == {"bf16"}
    with pytest.raises(SpecError, match=r"no layout trainer toy can run: toy: precision "
                                        r"fp8-tensorwise: .*\(toy/README, section 2\)"):
        make_spec({"space": {"precision": ["fp8-tensorwise"], "zero_stage": [1]}},
                  trainer="toy").candidates()
    with pytest.raises(SpecError, match=r"space\.zero_stage: toy has no ZeRO stage 3"):
        make_spec({"space": {"zero_stage": [1, 3]}}, trainer="toy")

    # Its runtime: the cost model prices its trials as it runs them.
    cost = cost_model_for(spec)
    assert cost.runtime == ZeroEngine(zero_engine="torch", ddp_overlaps=False,
                                      grads_once_per_step=False)
    assert cost.estimate(layout(tp=2, zero_stage=1)).step_time_s > 0

    # Its format: `best --format toy-flags` writes its file, and is the campaign's default.
    assert "toy-flags" in formats() and own_format(spec) == "toy-flags"
    assert export("toy-flags", spec, "t0001", layout(tp=2, dp=8)) == "--tp=2 --pp=1 --dp=8\n"


def test_a_registered_trainer_leaves_no_trace_once_unregistered(toy):
    unregister("toy")
    assert "toy" not in names() and "toy-flags" not in formats()


@pytest.mark.parametrize("changed,cause", [
    ({"zero_stage": 3}, "zero_stage 3 is FSDP2"),
    ({"zero_stage": 2}, "zero_stage 2 is FSDP2"),
    ({"tp": 2, "zero_stage": 1}, "with tp(2)"),
    ({"tp": 1, "pp": 2, "zero_stage": 0}, "with pp(2)"),
])
def test_the_builtin_trainer_refuses_a_bucket_size_where_it_builds_no_ddp(changed, cause):
    """jobs/trainer.py builds DDP, whose bucket_cap_mb is the knob, only for ZeRO 0 and 1 with
    tp 1 and pp 1: anywhere else the value would change nothing a trial measures."""
    spec = make_spec()
    reason = layout_refusal("builtin", spec, layout(**{"tp": 1, **changed},
                                                    bucket_size=25_000_000))
    assert reason is not None and reason.startswith("builtin: bucket_size: ")
    assert cause in reason and reason.endswith("set space.bucket_size to [null]")
    assert "\n" not in reason and ("jobs/trainer.py" in reason or "jobs/layout.py" in reason)


def test_the_builtin_trainer_takes_a_bucket_size_where_ddp_runs_and_none_anywhere():
    spec = make_spec()
    for zero_stage in (0, 1):
        assert layout_refusal("builtin", spec, layout(tp=1, zero_stage=zero_stage,
                                                      bucket_size=25_000_000)) is None
    assert layout_refusal("builtin", spec, layout(tp=2, zero_stage=3)) is None
    assert adapter("builtin").layout_refusal(spec, layout(tp=1, zero_stage=3)) is None


def test_a_spec_whose_only_layouts_bucket_without_ddp_says_so_in_one_line():
    spec = make_spec({"space": {"tp": [1], "zero_stage": [3], "bucket_size": [25_000_000]}})
    with pytest.raises(SpecError) as caught:
        spec.candidates()
    message = str(caught.value)
    assert "builtin: bucket_size: zero_stage 3 is FSDP2" in message and "\n" not in message
