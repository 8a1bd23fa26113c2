"""Machines: the typed `Cluster` and the named presets, one set of constants each, with sources.

Bandwidths are unidirectional GB/s (1e9 bytes/s): `intra_node_gbps` per device over the
node's fabric (NVLink, Infinity Fabric), `inter_node_gbps` per node over the network.
`peak_tflops` is the dense 16-bit peak of one device; MFU is measured against it.
`fp8_peak_tflops` is its dense FP8 peak (0: no FP8 tensor cores, so an FP8 layout cannot run);
`hbm_gbps` its memory bandwidth, which FP8's casts are bound by. The host side, for offload:
`host_memory_gb` per node, `host_link_gbps` per device (PCIe, or the CPU-GPU fabric) and
`host_adam_ns_per_param`, the node's CPU time of one AdamW update per parameter.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from orchestrator.presets.cluster_calibration import ClusterCalibration


class Cluster(BaseModel):
    """One kind of node, repeated: what the cost model and the backends need to know."""

    # Strict: numbers are numbers; finite and bounded far beyond any real machine.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    name: str = Field(default="custom", max_length=200)
    device: str = Field(default="gpu", max_length=200)
    gpus_per_node: int = Field(gt=0, le=1_024)
    memory_gb: float = Field(ge=1e-3, le=1e6, description="usable memory of one device")
    peak_tflops: float = Field(ge=1e-3, le=1e6)
    intra_node_gbps: float = Field(ge=1e-3, le=1e6)
    inter_node_gbps: float = Field(ge=1e-3, le=1e6)
    intra_node_latency_us: float = Field(default=5.0, ge=0, le=1e9)
    inter_node_latency_us: float = Field(default=10.0, ge=0, le=1e9)
    # Fixed cost of one collective call on top of its per-step latencies (kernel launch and
    # protocol set-up; NCCL's tuning model calls it baseLat). 0 = none.
    collective_base_latency_us: float = Field(default=0.0, ge=0, le=1e9)
    # Fraction of peak a transformer step's kernels reach on average: cuBLAS reaches 70-80% of
    # peak on large BF16 GEMMs on A100/H100, and norms, softmax and element-wise kernels pull
    # the average down to about 0.6 (Megatron-LM reports 52% HFU end to end on 3,072 A100s).
    # Calibration refits it from trials.
    compute_efficiency: float = Field(default=0.6, gt=0, le=1)
    # Shape dependence of that efficiency (costmodel/compute.py): a GEMM of m rows (tokens
    # of a micro-batch) and n columns (hidden / tp) reaches compute_efficiency ·
    # m/(m + gemm_half_m) · n/(n + gemm_half_n). 0 = shape-independent.
    gemm_half_m: float = Field(default=0.0, ge=0, le=1e9)
    gemm_half_n: float = Field(default=0.0, ge=0, le=1e9)
    # Per-step chunk (bytes) at which a collective reaches half its link bandwidth
    # (costmodel/collectives.py). 0 = latency only.
    msg_half_bytes: float = Field(default=0.0, ge=0, le=1e12)
    # Time of one optimizer (AdamW) step per parameter a rank updates: a memory-bound pass
    # over weights, gradients and both moments. 0 = not priced (the stock GPU presets: about
    # 1% of a step at their scales, docs/costmodel.md); `paratune profile` measures it.
    optimizer_ns_per_param: float = Field(default=0.0, ge=0, le=1e9)
    # Software cost of one collective call of PyTorch's parallel code, beyond the call
    # itself: FSDP2's copy-in/copy-out and hooks around each all-gather and reduce-scatter of
    # a unit, DTensor's dispatch and redistribution around each tensor-parallel collective.
    # Paid by the trainers that run them (costmodel/zero_engine.py: the "torch" engine). 0 = not
    # priced (the stock presets); `paratune profile` measures it on the trainer's own steps.
    fsdp_call_overhead_us: float = Field(default=0.0, ge=0, le=1e9)
    tp_call_overhead_us: float = Field(default=0.0, ge=0, le=1e9)
    # FP8 and the host side (module docstring); 0 = none or unknown.
    fp8_peak_tflops: float = Field(default=0.0, ge=0, le=1e6)
    hbm_gbps: float = Field(default=0.0, ge=0, le=1e6)
    host_memory_gb: float = Field(default=0.0, ge=0, le=1e7)
    host_link_gbps: float = Field(default=0.0, ge=0, le=1e6)
    host_adam_ns_per_param: float = Field(default=0.0, ge=0, le=1e9)
    # Memory a process holds before the model exists (CUDA context, allocator, torch itself).
    runtime_overhead_gb: float = Field(default=1.0, ge=0, le=1e6)
    # Communication backend the built-in trial job uses on this cluster.
    dist_backend: str = Field(default="nccl", max_length=200)
    # The cost model's multipliers fitted to this cluster's measurements (`paratune calibrate
    # --from` writes them); None: the analytic model as it is.
    calibration: ClusterCalibration | None = None

    @model_serializer(mode="wrap")
    def _without_an_absent_calibration(self, handler):
        """A preset with no calibration dumps as before the field existed, so a campaign's
        spec fingerprint (record/journal.py) and a written preset file stay the same."""
        data = handler(self)
        if isinstance(data, dict) and data.get("calibration", False) is None:
            del data["calibration"]
        return data


# NVIDIA presets share the NCCL constants. Latencies from NCCL's tuning model
# (src/graph/tuning.cc of current releases): with the Simple protocol that large collectives
# use, 3.4 us per ring step over NVLink and 14 us over the network (hwLat), plus 8.4 us per
# call (baseLat). NCCL charges the network rate only to the steps that cross
# nodes; collectives.py charges it to every step of a ring that spans nodes, each step waiting
# on its slowest hop, which is what reproduces ZeRO-3's collapse at 1,024 GPUs (AMSP §VI-B).
# Chunk cost (`msg_half_bytes`): 16 KB per ring step, so a network step reaches half the
# link rate at 16 KB + α·bw = 156 KB per rank. Chosen against six AMSP figures, which are
# therefore fits, not checks: docs/costmodel.md gives what 0, 8, 16, 32 and 64 KB each
# reproduce (benchmarks/chunk_cost_sensitivity.py).
# GEMM shape: cuBLAS BF16 GEMMs on A100/H100 reach 75-80% of peak at 4096-wide shapes and
# fall off below ~512 on either side (NVIDIA "Matrix Multiplication Background" guide, wave
# quantization and tile efficiency); within that, the 0.72 asymptote with halves m 128, n 256
# was chosen so that a 4096 x 4096 layer runs at 0.66 (AMSP's 64% MFU on 8 A800s, §III) and
# Megatron's 1T layer (m 2048, n 25600/8) at 0.63 (52% HFU on 3,072 A100s with bubble and TP
# communication): a fit to those two figures, not a check (costmodel/constants_provenance.py).
NCCL = dict(intra_node_latency_us=3.4, inter_node_latency_us=14.0, collective_base_latency_us=8.4,
            msg_half_bytes=16384.0, compute_efficiency=0.72, gemm_half_m=128.0,
            gemm_half_n=256.0)

# Hosts (offload). DGX A100: 2x AMD EPYC 7742 (128 cores), 1 or 2 TB (the 80 GB model ships 2 TB),
# PCIe Gen4 x16 per GPU, 32 GB/s each way. DGX H100: 2x Xeon Platinum 8480C (112 cores), 2 TB,
# PCIe Gen5 x16, 64 GB/s each way (NVIDIA DGX A100 and DGX H100 user guides). CPU AdamW per
# parameter: the DGX-2's measured 0.257 ns (v100-32g below) scaled by host memory bandwidth, as
# AdamW streams 16 bytes of state per parameter each way: 2x 6 channels of DDR4-2666 (256 GB/s)
# there, 2x 8 of DDR4-3200 (410 GB/s) on a DGX A100, 2x 8 of DDR5-4800 (614 GB/s) on a DGX H100.
DGX_A100_HOST = dict(host_memory_gb=2048.0, host_link_gbps=32.0, host_adam_ns_per_param=0.16)
DGX_H100_HOST = dict(host_memory_gb=2048.0, host_link_gbps=64.0, host_adam_ns_per_param=0.11)

CLUSTER_PRESETS: dict[str, Cluster] = {
    # This kind of machine: 2 cores, one trial rank per core, gloo over loopback.
    # peak: 2 AVX2 FMA units × 8 fp32 lanes × 2 FLOPs × ~3 GHz ≈ 0.1 TFLOPS per core.
    # Bandwidth: gloo all-reduce on loopback measured at ~1-3 GB/s. Overhead: `import torch`
    # and gloo hold ~0.4 GB RSS per rank (shared/research notes, §2). Host: the same 24 GB; an
    # offload copy is a memcpy within it (~5 GB/s on one core).
    "cpu-local": Cluster(
        name="cpu-local", device="cpu", gpus_per_node=2, memory_gb=8.0, peak_tflops=0.1,
        intra_node_gbps=2.0, inter_node_gbps=1.0, intra_node_latency_us=50.0,
        inter_node_latency_us=100.0, compute_efficiency=0.3, runtime_overhead_gb=0.4,
        dist_backend="gloo", host_memory_gb=24.0, host_link_gbps=5.0,
    ),
    # OLCF Frontier: 4× MI250X = 8 GCDs of 64 GB HBM2E per node; 191.5 TFLOPS FP16/BF16 per
    # GCD (383 per MI250X); GCD↔GCD Infinity Fabric 50-100 GB/s (50 GB/s per x16 link);
    # 4× Slingshot-11 200 Gb/s = 100 GB/s per node; 1.6 TB/s HBM2E per GCD; host: one 64-core
    # EPYC 7A53 with 512 GB DDR4, 36 GB/s each way to each GCD over Infinity Fabric; no FP8
    # (docs.olcf.ornl.gov, Frontier user guide).
    # Compute: an assumption until `paratune profile` runs on Frontier. rocBLAS/hipBLASLt BF16
    # GEMMs on MI250X reach about 3/4 of peak only on large square shapes (AMD ROCm blog,
    # "Measuring Max-Achievable FLOPs"), and the GCD needs larger tiles than an A100 to fill
    # its 110 CUs: asymptote 0.75, halves m 1024, n 128. RCCL on Slingshot: per-step latencies
    # 10 us (Infinity Fabric) and 20 us (network, libfabric), 64 KB half-bandwidth chunk.
    "frontier": Cluster(
        name="frontier", device="MI250X GCD", gpus_per_node=8, memory_gb=64.0,
        peak_tflops=191.5, intra_node_gbps=50.0, inter_node_gbps=100.0,
        intra_node_latency_us=10.0, inter_node_latency_us=20.0, compute_efficiency=0.75,
        gemm_half_m=1024.0, gemm_half_n=128.0, msg_half_bytes=65536.0,
        dist_backend="nccl", hbm_gbps=1600.0, host_memory_gb=512.0, host_link_gbps=36.0,
    ),
    # NVIDIA DGX-2 (ZeRO-Offload's test bed, arXiv 2101.06840, Table 2): 16 V100-SXM3 32 GB
    # (125 TFLOPS FP16 tensor-core peak, 900 GB/s HBM2) on NVSwitch (300 GB/s bidirectional per
    # GPU); 8x 100 Gb/s InfiniBand = 100 GB/s per node; host: 2x Xeon Platinum 8168 (48 cores),
    # 1.5 TB DDR4-2666, PCIe Gen3 x16 per GPU (32 GB/s bidirectional, 16 each way). CPU AdamW:
    # DeepSpeed's CPU-Adam updates 10B parameters in 2.57 s on this host (ZeRO-Offload, Table 4).
    # Compute: V100 kernels reach far less of peak than the A100/H100 asymptote above;
    # Megatron-LM's single-V100 baseline, a 1.2B GPT at 39 TFLOPS, is 30% of peak end to end
    # (Shoeybi et al., arXiv 1909.08053, §5), which the shape rule reaches (hidden 1,536, 8
    # sequences of 1,024) with an asymptote of 0.355.
    "v100-32g": Cluster(
        name="v100-32g", device="V100-SXM3-32GB", gpus_per_node=16, memory_gb=32.0,
        peak_tflops=125.0, intra_node_gbps=150.0, inter_node_gbps=100.0,
        **{**NCCL, "compute_efficiency": 0.355}, hbm_gbps=900.0, host_memory_gb=1536.0,
        host_link_gbps=16.0, host_adam_ns_per_param=0.257,
    ),
    # NVIDIA A100 SXM 80GB: 312 TFLOPS BF16 dense; NVLink3 600 GB/s bidirectional per GPU;
    # DGX A100: 8× HDR 200 Gb/s = 200 GB/s per node (NVIDIA A100 datasheet, DGX A100 guide).
    "a100-80g": Cluster(
        name="a100-80g", device="A100-SXM-80GB", gpus_per_node=8, memory_gb=80.0,
        peak_tflops=312.0, intra_node_gbps=300.0, inter_node_gbps=200.0, **NCCL,
        hbm_gbps=2039.0, **DGX_A100_HOST,
    ),
    # A800: the A100 with NVLink capped at 400 GB/s bidirectional; AMSP's test-bed has
    # 4× HDR InfiniBand = 800 Gb/s = 100 GB/s per node (AMSP, arXiv 2311.00257, §VI-A).
    "a800-80g": Cluster(
        name="a800-80g", device="A800-SXM-80GB", gpus_per_node=8, memory_gb=80.0,
        peak_tflops=312.0, intra_node_gbps=200.0, inter_node_gbps=100.0, **NCCL,
        hbm_gbps=2039.0, **DGX_A100_HOST,
    ),
    # NVIDIA H100 SXM: 989 TFLOPS BF16 dense; NVLink4 900 GB/s bidirectional per GPU;
    # DGX H100: 8× NDR 400 Gb/s = 400 GB/s per node; 1,979 TFLOPS FP8 dense, 3.35 TB/s HBM3
    # (NVIDIA H100 datasheet).
    "h100-80g": Cluster(
        name="h100-80g", device="H100-SXM-80GB", gpus_per_node=8, memory_gb=80.0,
        peak_tflops=989.0, intra_node_gbps=450.0, inter_node_gbps=400.0, **NCCL,
        fp8_peak_tflops=1979.0, hbm_gbps=3350.0, **DGX_H100_HOST,
    ),
    # NVIDIA H800 SXM: the H100's compute (989 TFLOPS BF16 dense) with NVLink capped at
    # 400 GB/s bidirectional per GPU. DeepSeek-V3's cluster (DeepSeek-V3 report, arXiv
    # 2412.19437, §3.1 and §3.2.2): 8 GPUs per node over NVLink/NVSwitch, one 400 Gb/s
    # InfiniBand NIC per GPU (8 × 50 GB/s = 400 GB/s per node); the report measures 160 GB/s
    # over NVLink and 50 GB/s over IB, which the 0.8 bus-bandwidth efficiency
    # (coefficients.py) gives from these link rates on NVLink (200 × 0.8).
    "h800-80g": Cluster(
        name="h800-80g", device="H800-SXM-80GB", gpus_per_node=8, memory_gb=80.0,
        peak_tflops=989.0, intra_node_gbps=200.0, inter_node_gbps=400.0, **NCCL,
        fp8_peak_tflops=1979.0, hbm_gbps=3350.0, **DGX_H100_HOST,
    ),
    # NVIDIA H200 SXM: the H100's compute (FP8 too) with 141 GB HBM3e at 4.8 TB/s (NVIDIA H200
    # datasheet).
    "h200-141g": Cluster(
        name="h200-141g", device="H200-SXM-141GB", gpus_per_node=8, memory_gb=141.0,
        peak_tflops=989.0, intra_node_gbps=450.0, inter_node_gbps=400.0, **NCCL,
        fp8_peak_tflops=1979.0, hbm_gbps=4800.0, **DGX_H100_HOST,
    ),
    # The clusters of the published measurements (benchmarks/measured/): datasheet figures, the
    # NCCL latencies above, and the GEMM-shape constants above, which were chosen for A100/H100
    # and are an assumption on the other GPUs. No constant here is fitted to a measured row.
    # Host fields stay 0 (no source offloads).
    # DLPerf's V100 cluster (Oneflow-Inc/DLPerf, Megatron-LM/README.md): 8 V100-SXM2 16 GB per
    # node in a DGX-1-style hybrid cube mesh, one 100 Gb/s EDR InfiniBand port per node
    # (12.5 GB/s). V100 SXM2: 125 TFLOPS FP16 tensor-core peak, 900 GB/s HBM2, 6 NVLink2 links
    # of 25 GB/s each way (NVIDIA V100 datasheet): 150 GB/s per GPU, an upper bound, as the cube
    # mesh links each GPU to 4 of the other 7 and NCCL's rings share the links. The V100
    # efficiency asymptote is v100-32g's (Megatron-LM's single-V100 baseline).
    "v100-16g": Cluster(
        name="v100-16g", device="V100-SXM2-16GB", gpus_per_node=8, memory_gb=16.0,
        peak_tflops=125.0, intra_node_gbps=150.0, inter_node_gbps=12.5,
        **{**NCCL, "compute_efficiency": 0.355}, hbm_gbps=900.0,
    ),
    # NVIDIA A100 SXM 40GB: the 80 GB part's compute and NVLink with 1,555 GB/s HBM2 (A100
    # datasheet); MosaicML's cluster (llm-foundry's benchmark table): 1,600 Gb/s RoCE per
    # node = 200 GB/s.
    "a100-40g": Cluster(
        name="a100-40g", device="A100-SXM-40GB", gpus_per_node=8, memory_gb=40.0,
        peak_tflops=312.0, intra_node_gbps=300.0, inter_node_gbps=200.0, **NCCL,
        hbm_gbps=1555.0,
    ),
    # Meta's Grand Teton H100 of torchtitan's benchmarks (benchmarks/
    # llama3_h100_202412_torchtitan.md): 96 GB HBM2e at 2.4 TB/s and a 500 W power limit,
    # NVLink within 8 GPUs, 400 Gb/s RDMA per GPU (400 GB/s per node). Its peak, the same file
    # says (footnote 2), "is between SXM and NVL" and not known: 989 and 835.5 TFLOPS BF16
    # dense (1,979 and 1,670.5 FP8; NVIDIA H100 datasheet, H100 SXM and H100 NVL). The preset
    # takes the NVL's, the least favourable end of that range; docs/validation.md gives the
    # source's error at both ends. NVLink: the H100 SXM datasheet's.
    "h100-96g": Cluster(
        name="h100-96g", device="H100-96GB-HBM2e-500W", gpus_per_node=8, memory_gb=96.0,
        peak_tflops=835.5, intra_node_gbps=450.0, inter_node_gbps=400.0, **NCCL,
        fp8_peak_tflops=1670.5, hbm_gbps=2400.0,
    ),
    # NVIDIA HGX/DGX B200 (DGX B200 datasheet, HGX B200 specifications): 8 GPUs of 180 GB
    # HBM3e at 8 TB/s, 2,250 TFLOPS BF16 and 4,500 FP8 dense per GPU (36 and 72 PFLOPS per 8
    # GPUs with sparsity), NVLink5 1.8 TB/s bidirectional per GPU; 8x 400 Gb/s ConnectX-7 per
    # node = 400 GB/s. MXFP8 runs at the FP8 rate.
    "b200-180g": Cluster(
        name="b200-180g", device="B200-SXM-180GB", gpus_per_node=8, memory_gb=180.0,
        peak_tflops=2250.0, intra_node_gbps=900.0, inter_node_gbps=400.0, **NCCL,
        fp8_peak_tflops=4500.0, hbm_gbps=8000.0,
    ),
    # NVIDIA HGX/DGX B300 (Blackwell Ultra; HGX B300 specifications): the B200's BF16 and FP8
    # dense rates, 270 GB HBM3e usable (MLPerf v5.1 names it B300-SXM-270GB) at 8 TB/s,
    # NVLink5; 8x 800 Gb/s ConnectX-8 per node = 800 GB/s.
    "b300-270g": Cluster(
        name="b300-270g", device="B300-SXM-270GB", gpus_per_node=8, memory_gb=270.0,
        peak_tflops=2250.0, intra_node_gbps=900.0, inter_node_gbps=800.0, **NCCL,
        fp8_peak_tflops=4500.0, hbm_gbps=8000.0,
    ),
    # NVIDIA GB200 NVL72 (GB200 NVL72 datasheet): 72 GPUs in one NVLink5 domain (1.8 TB/s
    # bidirectional per GPU), so the NVLink domain is the "node" here; per GPU 186 GB HBM3e
    # (13.4 TB / 72) at 8 TB/s, 2,500 TFLOPS BF16 and 5,000 FP8 dense (360 and 720 PFLOPS
    # sparse per rack); one 400 Gb/s ConnectX-7 per GPU: 72 x 50 = 3,600 GB/s per domain.
    "gb200-nvl72": Cluster(
        name="gb200-nvl72", device="GB200", gpus_per_node=72, memory_gb=186.0,
        peak_tflops=2500.0, intra_node_gbps=900.0, inter_node_gbps=3600.0, **NCCL,
        fp8_peak_tflops=5000.0, hbm_gbps=8000.0,
    ),
    # NVIDIA GB300 NVL72 (GB300 NVL72 datasheet): GB200's NVLink domain and dense BF16/FP8
    # rates, 279 GB HBM3e per GPU (20 TB / 72) at 8 TB/s, one 800 Gb/s ConnectX-8 per GPU:
    # 72 x 100 = 7,200 GB/s per domain.
    "gb300-nvl72": Cluster(
        name="gb300-nvl72", device="GB300", gpus_per_node=72, memory_gb=279.0,
        peak_tflops=2500.0, intra_node_gbps=900.0, inter_node_gbps=7200.0, **NCCL,
        fp8_peak_tflops=5000.0, hbm_gbps=8000.0,
    ),
}


# Presets whose peak the source gives only as a range, with the end the preset does not take,
# so a report can print its figures at both (benchmarks/validate_costmodel.py).
PEAK_RANGE_OTHER_END: dict[str, dict[str, float]] = {
    "h100-96g": {"peak_tflops": 989.0, "fp8_peak_tflops": 1979.0},  # the H100 SXM's
}
