"""The environment variables a trial may be given without a code grant.

A list of names, not of prefixes: a prefix admits, beside a library's tuning variables, the
ones that name a plugin to load (`NCCL_NET_PLUGIN`, `FI_PROVIDER_PATH`) or a file to write
(`NCCL_DEBUG_FILE`, `TORCH_NCCL_DEBUG_INFO_TEMP_FILE`). Each name here only tunes its library:
it loads no code and reads or writes no file. docs/service.md gives each one's source
(tests/server/test_trial_env.py keeps that table and this list the same).
"""

from __future__ import annotations

TUNING_ENV = frozenset({
    # NCCL (RCCL reads the same names): levels, switches, sizes, interface and adapter names.
    "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS",
    "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD",
    "NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_IB_GID_INDEX", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT",
    "NCCL_IB_SL", "NCCL_IB_TC", "NCCL_IB_QPS_PER_CONNECTION",
    "NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
    "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ", "NCCL_CROSS_NIC", "NCCL_PXN_DISABLE",
    "NCCL_BUFFSIZE", "NCCL_NTHREADS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
    "NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "NCCL_COLLNET_ENABLE", "NCCL_CUMEM_ENABLE",
    "NCCL_IGNORE_CPU_AFFINITY",
    # PyTorch's process group (ProcessGroupNCCL.hpp; NCCL_* are its older names) and allocator.
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING",
    "TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT",
    "TORCH_NCCL_AVOID_RECORD_STREAMS", "TORCH_NCCL_HIGH_PRIORITY",
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
    # Threads and streams.
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_DEVICE_MAX_CONNECTIONS",
    # ROCm: peer-to-peer over PCIe for RCCL.
    "HSA_FORCE_FINE_GRAIN_PCIE",
    # libfabric: which provider, by name (FI_PROVIDER_PATH, which loads one, is not here),
    # and the EFA (AWS) and CXI (Slingshot: Frontier, Perlmutter) providers' tuning.
    "FI_PROVIDER", "FI_MR_CACHE_MONITOR",
    "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE", "FI_EFA_USE_HUGE_PAGE",
    "FI_CXI_ATS", "FI_CXI_RDZV_PROTO", "FI_CXI_RDZV_THRESHOLD", "FI_CXI_RDZV_GET_MIN",
    "FI_CXI_RDZV_EAGER_SIZE", "FI_CXI_DEFAULT_CQ_SIZE", "FI_CXI_DEFAULT_TX_SIZE",
    "FI_CXI_DISABLE_HOST_REGISTER", "FI_CXI_RX_MATCH_MODE", "FI_CXI_OFLOW_BUF_SIZE",
    # UCX: which transports and devices, by name.
    "UCX_TLS", "UCX_NET_DEVICES",
})
