"""Context-parallel attention (jobs/context_parallel.py) gives the single-process result.

Under torchrun with gloo (world sizes 2 and 4; cp 2 and 4, cp 2 beside dp 2 at world size 4),
each comm type ("allgather", "a2a" Ulysses, "p2p" ring), with 4, 2 and 1 kv heads for 4 query
heads: the local outputs and the q, k, v gradients match a single-process causal attention over
the whole sequence in float32 within TOLERANCE, relative to the largest magnitude of each
reference tensor. The tolerance: float32 has a unit roundoff of 6e-8; a CP path changes only the
order of the softmax and gradient sums (over at most 32 keys, 8 channels, 4 query heads sharing
a kv head, cp ranks for the K/V gradients), which bounds the difference near 1e-6; we measure at
most 6e-7 (the ring, which merges blocks by log-sum-exp). 1e-5 leaves that headroom, while a
wrong mask or chunk order is off by tens of percent. Two broken variants prove that: a mask
from local positions, and contiguous shards fed to attention that expects head-tail ones.
All cases of a world size run in one torchrun launch (tests/dist_cp.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from jobs import context_parallel as cpa

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5
COMMS = ("allgather", "a2a", "p2p")


def launch(tmp_path: Path, nproc: int) -> dict:
    out_file = tmp_path / f"cp{nproc}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        ["torchrun", "--standalone", f"--nproc_per_node={nproc}",
         str(ROOT / "tests" / "dist_cp.py"), str(out_file)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out_file.exists(), proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(out_file.read_text())


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[int, dict]:
    return {n: launch(tmp_path_factory.mktemp(f"world{n}"), n) for n in (2, 4)}


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_every_comm_type_matches_single_process_attention(results, world):
    out = results[world]
    expected = {f"cp{cp}-{comm}-kv{kv}" for cp in {2, world} for comm in COMMS for kv in (4, 2, 1)}
    assert expected <= set(out)
    failures = [f"{name} {field}: {diff:.2e}" for name in sorted(expected)
                for field, diff in out[name].items() if diff > TOLERANCE]
    assert not failures, "\n".join(failures)


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_a_mask_from_local_positions_breaks_the_comparison(results, world):
    names = [n for n in results[world] if n.endswith("-local_mask")]
    assert len(names) == 2 * len({2, world})  # allgather and p2p for each cp
    for name in names:
        assert results[world][name]["out"] > 100 * TOLERANCE, (name, results[world][name])


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_contiguous_chunks_against_headtail_attention_break_the_comparison(results, world):
    names = [n for n in results[world] if n.endswith("-contiguous")]
    assert len(names) == len(COMMS) * len({2, world})
    for name in names:
        assert results[world][name]["out"] > 100 * TOLERANCE, (name, results[world][name])


@pytest.mark.slow
def test_ulysses_refuses_heads_that_do_not_split_over_cp(results):
    assert "3 query heads" in results[2]["a2a-heads-error"]
    assert "cp=2" in results[2]["a2a-heads-error"]


@pytest.mark.parametrize("cp", [1, 2, 4])
def test_headtail_shards_cover_the_sequence_and_gather_back(cp):
    x = torch.randn(2, 16, 3)
    shards = [cpa.shard_sequence(x, cp, r) for r in range(cp)]
    assert torch.equal(cpa.unshard_sequence(shards, cp), x)
    for r, shard in enumerate(shards):
        assert torch.equal(shard, x[:, cpa.local_positions(16, cp, r)])


def test_rank_r_holds_chunk_r_and_its_mirror():
    positions = cpa.local_positions(16, 2, 0).tolist()
    assert positions == [0, 1, 2, 3, 12, 13, 14, 15]
    assert cpa.local_positions(16, 2, 1).tolist() == [4, 5, 6, 7, 8, 9, 10, 11]
    assert sorted(cpa.headtail_order(16, 4).tolist()) == list(range(16))


def test_sequences_that_do_not_split_into_2cp_chunks_are_refused():
    with pytest.raises(ValueError, match="2 x cp = 8"):
        cpa.shard_sequence(torch.zeros(1, 12), 4, 0)
    with pytest.raises(ValueError, match="one of"):
        cpa.context_parallel_attention("ring", None)
    assert cpa.context_parallel_attention("p2p", None) is cpa.causal_attention
