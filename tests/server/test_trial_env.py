"""Which environment variables a trial may be given without a code grant: named tuning
variables only, never one that names code for a library to load or a file for it to read or
write, and docs/service.md's table lists exactly the names the service admits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.server.trial_env import TUNING_ENV
from orchestrator.server.trust import code_in

SERVICE_DOC = Path(__file__).resolve().parents[2] / "docs" / "service.md"
TABLE_HEADER = "| variable | what it tunes | source |"

# Each loads a library or plugin, or reads or writes a file or folder the user names (NCCL's
# env.html and source, libfabric's fabric(7), PyTorch's ProcessGroupNCCL.hpp, MIOpen's, UCX's
# and TransformerEngine's own documentation).
LOADS_OR_WRITES = ["NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN",
                   "NCCL_ENV_PLUGIN", "NCCL_GIN_PLUGIN", "NCCL_RMA_PLUGIN", "NCCL_IBVERBS_LIB",
                   "NCCL_DEBUG_FILE", "NCCL_TOPO_FILE", "NCCL_TOPO_DUMP_FILE", "NCCL_GRAPH_FILE",
                   "NCCL_GRAPH_DUMP_FILE", "NCCL_CONF_FILE", "NCCL_TUNER_CONFIG_FILE",
                   "FI_PROVIDER_PATH", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                   "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_TRACE_BUFFER_SIZE",
                   "MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR", "UCX_MODULE_DIR",
                   "UCX_LOG_FILE", "NVTE_CUDA_INCLUDE_PATH", "LD_PRELOAD"]


@pytest.mark.parametrize("name", LOADS_OR_WRITES)
def test_a_variable_that_loads_code_or_names_a_file_takes_a_grant(name):
    assert code_in({"trial": {"env": {name: "/home/alice/libevil.so"}}}, None) == \
        [f"trial.env.{name}"]


def test_the_tuning_variables_take_no_grant():
    assert code_in({"trial": {"env": {name: "1" for name in TUNING_ENV}}}, None) == []


def documented() -> set[str]:
    """The names in docs/service.md's table of admitted variables (first column)."""
    lines = SERVICE_DOC.read_text().splitlines()
    start = lines.index(TABLE_HEADER) + 2  # past the header and its |---| line
    names: set[str] = set()
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        names |= set(re.findall(r"`([A-Z0-9_]+)`", line.split("|")[1]))
    return names


def test_the_service_docs_list_exactly_the_admitted_variables():
    names = documented()
    assert names - TUNING_ENV == set(), "documented but not admitted"
    assert TUNING_ENV - names == set(), "admitted but not documented"
