#include "kernels/cublas_support.hpp"

#include "kernels/cublas_gemm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace meshtrain::cublas {
namespace {

std::atomic<bool> tf32{false};

// CUBLAS_DEFAULT_MATH keeps fp32 products exact; without the DISALLOW flag cuBLAS may add split-K
// partial sums of bf16/fp16 products in 16 bits, where the dispatch promises float accumulation.
cublasMath_t math_mode() {
  const int base = tf32.load(std::memory_order_relaxed) ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  return static_cast<cublasMath_t>(base | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
}

}  // namespace

void set_tf32(bool on) { tf32.store(on, std::memory_order_relaxed); }

namespace detail {

void fail(cublasStatus_t status, const char* call, const char* file, int line) {
  throw std::runtime_error(
      fmt::format("{}:{}: {} failed: {} ({})\nHINT: CUBLAS_STATUS_NOT_INITIALIZED means no usable GPU or driver "
                  "(check nvidia-smi and CUDA_VISIBLE_DEVICES); ALLOC_FAILED means the GPU is out of memory",
                  file, line, call, cublasGetStatusName(status), cublasGetStatusString(status)));
}

bool tf32_enabled() { return tf32.load(std::memory_order_relaxed); }

// One handle per host thread, bound to the stream of each call. cuBLAS handles are costly to
// create and not thread-safe to share; a thread-local cache is the usual answer.
cublasHandle_t handle_for(void* stream) {
  struct Owner {
    cublasHandle_t handle = nullptr;
    ~Owner() {
      if (handle != nullptr) cublasDestroy(handle);
    }
  };
  thread_local Owner owner;
  if (owner.handle == nullptr) MESHTRAIN_CUBLAS_CHECK(cublasCreate(&owner.handle));
  MESHTRAIN_CUBLAS_CHECK(cublasSetStream(owner.handle, static_cast<cudaStream_t>(stream)));
  MESHTRAIN_CUBLAS_CHECK(cublasSetMathMode(owner.handle, math_mode()));
  return owner.handle;
}

void* stream_block(void* stream, Block use, std::size_t bytes) {
  struct Allocation {
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  using PerStream = std::array<Allocation, std::size_t(Block::count)>;
  struct Blocks {
    std::unordered_map<void*, PerStream> by_stream;
    ~Blocks() {
      for (auto& [stream, blocks] : by_stream) {
        for (Allocation& block : blocks) cudaFree(block.data);
      }
    }
  };
  thread_local Blocks blocks;
  const auto s = static_cast<cudaStream_t>(stream);
  Allocation& block = blocks.by_stream[stream][std::size_t(use)];
  if (bytes > block.bytes) {
    const std::size_t grown = std::max({bytes, 2 * block.bytes, std::size_t(512)});
    void* old = std::exchange(block.data, nullptr);
    block.bytes = 0;
    if (old != nullptr) MESHTRAIN_CUDA_CHECK(cudaFreeAsync(old, s));
    MESHTRAIN_CUDA_CHECK(cudaMallocAsync(&block.data, grown, s));
    block.bytes = grown;
  }
  return block.data;
}

}  // namespace detail
}  // namespace meshtrain::cublas
