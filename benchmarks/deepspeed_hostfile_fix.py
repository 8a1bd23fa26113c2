"""The `deepspeed` launcher with one fix, for `benchmarks/deepspeed_autotuner.py --fix-hostfile`.

DeepSpeed 0.19.8's ZeRO sub-space experiments (`Autotuner._generate_experiments`) carry no
"hostfile", which the scheduler reads unconditionally (scheduler.py:319), so each fails with a
KeyError. This adds the key, as autotuner.py:687 does for its own experiments, then runs the
launcher as `deepspeed` would: `python benchmarks/deepspeed_hostfile_fix.py <deepspeed args>`.
"""

from deepspeed.autotuning import autotuner
from deepspeed.launcher.runner import main

generate = autotuner.Autotuner._generate_experiments


def with_hostfile(self, *args):
    experiments = generate(self, *args)
    for experiment in experiments:
        experiment.setdefault("hostfile", self.args.hostfile)
    return experiments


if __name__ == "__main__":
    autotuner.Autotuner._generate_experiments = with_hostfile
    main()
