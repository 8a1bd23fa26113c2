"""The environment a cluster's own documentation asks every job to set, which launch files
export before the trials' `trial.env` (which wins): ParaTune's constants, with their sources,
keyed by the cluster preset's name. `{job}` in a value stands for the job's own ID
($SLURM_JOB_ID, else the script's PID), for a folder no other job shares."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterEnv:
    source: str
    variables: dict[str, str]
    notes: tuple[str, ...] = ()


CLUSTER_ENV: dict[str, ClusterEnv] = {
    # OLCF's "PyTorch on Frontier" guide (docs.olcf.ornl.gov, source olcf/olcf-user-docs
    # software/python/pytorch_frontier.rst: its batch script and "Best Practices"): MIOpen's kernel database defaults to the home folder, whose
    # file locks fail under many ranks, so each job keeps it in node-local /tmp (MIOpen makes
    # the folder); RCCL starts up over the Slingshot interface hsn0, and NCCL_NET_GDR_LEVEL=3
    # (GPU-direct RDMA) and NCCL_CROSS_NIC=1 are the guide's settings for speed at scale (it
    # says to drop the first if a job hangs).
    "frontier": ClusterEnv(
        source="OLCF Frontier user guide, docs.olcf.ornl.gov: PyTorch on Frontier, RCCL",
        variables={"MIOPEN_USER_DB_PATH": "/tmp/miopen-cache-{job}",
                   "MIOPEN_CUSTOM_CACHE_DIR": "/tmp/miopen-cache-{job}",
                   "NCCL_SOCKET_IFNAME": "hsn0", "NCCL_NET_GDR_LEVEL": "3",
                   "NCCL_CROSS_NIC": "1"},
        notes=("RCCL reaches Slingshot through the aws-ofi-rccl plugin: put its lib folder on "
               "LD_LIBRARY_PATH (backend.setup),",
               "and drop NCCL_NET_GDR_LEVEL if a job hangs (the guide's advice).")),
}
