#include "kernels/cudnn_support.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <utility>

namespace meshtrain::cudnn::detail {

void fail(const std::string& what, const char* call, const std::string& message) {
  throw std::runtime_error(fmt::format(
      "cuDNN attention {}: {} failed: {}\nHINT: no usable GPU or driver: check nvidia-smi and "
      "CUDA_VISIBLE_DEVICES; 'not supported' for a shape or GPU: this cuDNN has no fused kernel for it (the "
      "Kokkos kernel runs every shape: build without MESHTRAIN_ENABLE_CUDNN); to see why, run with "
      "CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE=stderr (the frontend) or CUDNN_LOGLEVEL_DBG=2 "
      "CUDNN_LOGDEST_DBG=stderr (cuDNN)",
      what, call, message));
}

void check(cudnnStatus_t status, const char* call, const std::string& what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  std::array<char, 512> last{};
  cudnnGetLastErrorString(last.data(), last.size());
  fail(what, call, fmt::format("{} ({})", cudnnGetErrorString(status), last.data()));
}

void check(cudaError_t error, const char* call, const std::string& what) {
  if (error == cudaSuccess) return;
  fail(what, call, fmt::format("{} ({})", cudaGetErrorName(error), cudaGetErrorString(error)));
}

// One handle per device for the process. cuDNN handles are costly to make (they load the kernels'
// libraries) and the wrapper serialises its calls, so one is shared by every thread and stream; each call
// binds its stream first.
cudnnHandle_t handle_for(int device, void* stream, const std::string& what) {
  struct Handles {
    std::map<int, cudnnHandle_t> by_device;
    ~Handles() {
      for (auto& entry : by_device) cudnnDestroy(entry.second);
    }
  };
  static Handles handles;
  auto [it, made] = handles.by_device.try_emplace(device, nullptr);
  if (made) {
    cudnnHandle_t handle = nullptr;
    const cudnnStatus_t status = cudnnCreate(&handle);
    if (status != CUDNN_STATUS_SUCCESS) handles.by_device.erase(it);
    check(status, "cudnnCreate", what);
    it->second = handle;
  }
  check(cudnnSetStream(it->second, static_cast<cudaStream_t>(stream)), "cudnnSetStream", what);
  return it->second;
}

void* workspace_for(int device, void* stream, std::size_t bytes, const std::string& what) {
  if (bytes == 0) return nullptr;
  struct Block {
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  struct Blocks {
    std::map<std::pair<int, std::uintptr_t>, Block> by_stream;
    ~Blocks() {
      for (auto& entry : by_stream) cudaFree(entry.second.data);
    }
  };
  static Blocks blocks;
  const auto s = static_cast<cudaStream_t>(stream);
  Block& block = blocks.by_stream[{device, reinterpret_cast<std::uintptr_t>(stream)}];
  if (bytes > block.bytes) {
    const std::size_t grown = std::max({bytes, 2 * block.bytes, std::size_t(1) << 20});
    void* old = std::exchange(block.data, nullptr);
    block.bytes = 0;
    if (old != nullptr) check(cudaFreeAsync(old, s), "cudaFreeAsync", what);
    check(cudaMallocAsync(&block.data, grown, s), "cudaMallocAsync", what);
    block.bytes = grown;
  }
  return block.data;
}

}  // namespace meshtrain::cudnn::detail
