"""`paratune profile`: time model steps by shape and collectives, write the preset they fit.

Without a spec the job runs here, on one node, through the local backend. With `--spec` it
goes through that campaign's backend (local or Ray: one node; Slurm: its nodes), with its
trials' environment, and refines its cluster preset: groups that span nodes measure the
network.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import RUNS_DIR_OPTION, out, print_json
from orchestrator.common.errors import UserError


def refuse_unusable_out(path: Path) -> None:
    """A preset path the fit could not be written to, or that a spec's `cluster:` would not
    read as a file (it takes names ending in .yaml or .yml), fails now, not after the job ran."""
    folder = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    reason = None
    if path.is_dir():
        reason = "it is a folder"
    elif not folder.is_dir():
        reason = f"{folder} is a file"
    elif not os.access(path if path.exists() else folder, os.W_OK):
        reason = "permission denied"
    if reason:
        raise UserError(f"--out {path}: cannot write the preset there ({reason}); give a file "
                        "path in a writable folder")
    if path.suffix not in (".yaml", ".yml"):
        raise UserError(f"--out {path}: a preset file's name ends in .yaml (a spec's cluster: "
                        "reads it by that); e.g. --out presets/profiled.yaml")


def profile(
    cluster: Optional[str] = typer.Option(None, "--cluster",
                                          help="preset to start from (default: cpu-local)"),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="ranks per node (default: 2, or "
                                       "the spec's gpus_per_node)"),
    spec_file: Optional[Path] = typer.Option(None, "--spec", help="run on this campaign's "
                                             "backend and refine its cluster preset"),
    nodes: Optional[int] = typer.Option(None, "--nodes", help="nodes to profile (with --spec; "
                                        "default: the spec's scale.nodes)"),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", min=1, help="sequence length "
                                          "the profiled model steps (default: the spec's "
                                          "model's; without a spec 128 on cpu presets, else "
                                          "2048)"),
    out_file: Path = typer.Option(Path("presets/profiled.yaml"), "--out",
                                  help="where to write the cluster preset"),
    runs_dir: Optional[Path] = RUNS_DIR_OPTION,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Time model steps by shape and collectives (here, or with --spec through a campaign's
    backend on its nodes); write a cluster preset that a spec names with `cluster: FILE`."""
    from orchestrator.backends import make_backend
    from orchestrator.common.paths import runs_root
    from orchestrator.scheduling.profiling import (
        local_target,
        run_profile,
        spec_target,
        write_preset,
    )
    from orchestrator.campaign_spec import load_spec
    from orchestrator.trial.folder import TrialFolder

    refuse_unusable_out(out_file)
    if spec_file is None:
        if nodes not in (None, 1):
            raise UserError("--nodes: profiling several nodes needs --spec SPEC with a slurm "
                            "backend, which reaches them")
        target = local_target(cluster or "cpu-local", 2 if gpus is None else gpus, seq_len)
    else:
        if cluster is not None:
            raise UserError("--cluster: with --spec the spec's cluster preset is the one refined")
        target = spec_target(load_spec(spec_file), nodes, gpus, seq_len)
    folder = TrialFolder(runs_root(runs_dir) / "_profile" / f"profile-{target.base.name}")
    backend = make_backend(target.backend, gpus_per_node=target.ranks_per_node,
                           use_gpus=target.base.device != "cpu")
    try:
        measured = run_profile(backend, folder, target)
    finally:
        backend.shutdown()
    preset = write_preset(target.base, measured, out_file)
    if as_json:
        print_json({"preset": str(out_file), "cluster": preset.model_dump(), "profile": measured})
        return
    _print_preset(target, preset, measured, out_file)


def _print_preset(target, preset, measured: dict, out_file: Path) -> None:
    """What the profile measured, as the preset it wrote holds it."""
    if preset.peak_tflops != target.base.peak_tflops:
        out.print(f"measured faster than {target.base.name}'s nominal peak: peak raised from "
                  f"{target.base.peak_tflops:g} to {preset.peak_tflops:.3g} TFLOPS")
    network = ""
    if target.nodes > 1:
        network = (f"; between nodes {preset.inter_node_gbps:.2f} GB/s per node, "
                   f"{preset.inter_node_latency_us:.0f} us per step")
    out.print(f"wrote {out_file}: compute efficiency {preset.compute_efficiency:.2f} "
              f"(halves m {preset.gemm_half_m:g}, n {preset.gemm_half_n:g}), intra-node "
              f"{preset.intra_node_gbps:.2f} GB/s, {preset.intra_node_latency_us:.0f} us per step"
              f"{network}")
    if measured.get("runtime"):
        out.print(f"PyTorch's software cost per collective: FSDP2 "
                  f"{preset.fsdp_call_overhead_us:.0f} us, DTensor TP "
                  f"{preset.tp_call_overhead_us:.0f} us")
