// Cluster presets for `meshtrain plan`.
#include "plan/cluster.hpp"

#include "core/byte_units.hpp"
#include "core/errors.hpp"

#include <unistd.h>

#include <algorithm>

namespace meshtrain {
namespace {

constexpr double GB = 1e9;
constexpr double TFLOPS = 1e12;
constexpr double us = 1e-6;

double physical_memory_bytes() { return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)); }

// This machine: 2 cores of an AMD EPYC (AVX-512), Debian 12, OpenBLAS 0.3.21, MPICH 4.0.2 ch4:ucx.
// Measured 2026-11-29 on a release build, on a machine shared with other builds: each figure is
// the fastest of 3-4 runs at different moments (others' work only ever slows a run down), with
// bench/plan_vs_measured.py on jobs/bench/gpt2_l6_c384.ini (140.5 GFLOP per 2048-token step):
//  - peak: 233 GFLOP/s, the sgemm rate on the benchmark model's own GEMM shapes
//    (`bench_sgemm --model-shapes`, share/docs/benchmark.md);
//  - efficiency: with both cores busy (dp 2: 0.711 s per step, 0.015 s of it communication) the
//    node's ranks together reach 0.85 of it;
//  - serial fraction: one rank alone takes 0.753 s, 1.07× longer, its single-threaded Kokkos
//    kernels leaving the second core idle: 1 + s·(cores/ranks − 1) = 1.07;
//  - links: `mpiexec -n 2 bench_mpi_links`: 0.5 µs for an 8-byte message, 1.9 GB/s all-reduce bus
//    bandwidth for 16 MiB (the ping-pong moves 4.5 GB/s; collectives, which also add, are used);
//    at 4 and 8 ranks on the 2 cores an 8-byte ping-pong takes 4 and 8 ms one way (the 250 Hz
//    scheduler's tick): 2 ms × ranks / cores;
//  - memory: the machine's RAM, read at run time.
// The ranks share the node: N ranks on the 2 cores each get 1/N of its compute.
Cluster local_preset() {
  Cluster c;
  c.preset = "local";
  c.ranks_per_node = 0;
  c.host_only = true;
  c.device_memory_bytes = physical_memory_bytes();
  c.peak_flops_fp32 = 233e9;
  c.peak_flops_16bit = 233e9;  // the host kernels compute in fp32 whatever the storage type
  c.efficiency = 0.85;
  c.intra = {1.9 * GB, 0.5 * us};
  c.inter = c.intra;
  c.cores_per_node = 2;
  c.serial_fraction = 0.07;
  c.oversubscribed_latency_s = 2e-3;
  return c;
}

// 8 GPUs per node with NVLink inside the node and one InfiniBand NIC per GPU between nodes.
// Peaks: NVIDIA data sheets, dense (no sparsity). Intra bandwidth: NCCL all-reduce bus bandwidth
// measured on 8×H100/H200 NVLink, ~370-480 GB/s (nccl-tests issues 212, 272; figures.md), 450
// taken; A100 NVLink3 half of that. Inter: 400 Gb/s NDR (H100/H200) or 200 Gb/s HDR (A100) per
// GPU. Latencies: a few µs, typical of NCCL's small-message all-reduce and of InfiniBand.
// Efficiency 0.6: llm.c's GPT-2 runs reach 56-61 % MFU on 8×A100 (figures.md), comm included.
// Reserve: CUDA context and NCCL buffers, assumed 1 GiB per GPU.
Cluster gpu_preset(const char* name, double memory_gib, double fp32_tflops, double bf16_tflops, double nvlink_gbs,
                   double ib_gbs) {
  Cluster c;
  c.preset = name;
  c.ranks_per_node = 8;
  c.host_only = false;
  c.device_memory_bytes = memory_gib * GiB;
  c.peak_flops_fp32 = fp32_tflops * TFLOPS;
  c.peak_flops_16bit = bf16_tflops * TFLOPS;
  c.efficiency = 0.6;
  c.intra = {nvlink_gbs * GB, 3 * us};
  c.inter = {ib_gbs * GB, 5 * us};
  c.device_reserve_bytes = 1 * GiB;
  return c;
}

}  // namespace

double Cluster::peak_flops(Precision precision) const {
  return precision == Precision::fp32 ? peak_flops_fp32 : peak_flops_16bit;
}

int Cluster::ranks_on_node(int rank, int world) const {
  if (ranks_per_node <= 0) return world;
  const int first = node_of(rank) * ranks_per_node;
  return std::min(ranks_per_node, world - first);
}

double Cluster::rank_flops(Precision precision, int ranks) const {
  const double device = peak_flops(precision) * efficiency;
  if (!host_only) return device;
  double slowdown = 1;
  if (cores_per_node > 0 && ranks < cores_per_node) slowdown += serial_fraction * (double(cores_per_node) / ranks - 1);
  return device / ranks / slowdown;
}

Link Cluster::intra_link(int ranks) const {
  Link link = intra;
  if (host_only && cores_per_node > 0 && ranks > cores_per_node) {
    link.latency_s = std::max(link.latency_s, oversubscribed_latency_s * ranks / cores_per_node);
  }
  return link;
}

std::vector<std::string> cluster_preset_names() { return {"local", "h100-sxm-8", "h200-sxm-8", "a100-80gb-8"}; }

Cluster cluster_preset(const std::string& name) {
  if (name == "local") return local_preset();
  // Memory as nvidia-smi reports it: "80 GB" is 81559 MiB (79.6 GiB), "141 GB" 143771 MiB (140.4 GiB).
  // H100 SXM: 989 TFLOP/s bf16 dense, 67 TFLOP/s fp32; H200: the same chip with more memory.
  if (name == "h100-sxm-8") return gpu_preset("h100-sxm-8", 79.6, 67, 989, 450, 50);
  if (name == "h200-sxm-8") return gpu_preset("h200-sxm-8", 140.4, 67, 989, 450, 50);
  // A100 SXM 80 GB: 312 TFLOP/s bf16 dense, 19.5 TFLOP/s fp32; NVLink3 ~230 GB/s bus; HDR 25 GB/s.
  if (name == "a100-80gb-8") return gpu_preset("a100-80gb-8", 79.6, 19.5, 312, 230, 25);
  std::string valid;
  for (const auto& n : cluster_preset_names()) valid += (valid.empty() ? "" : ", ") + n;
  input_error("--cluster = '{}' is not a preset: valid presets are {}", name, valid);
}

}  // namespace meshtrain
