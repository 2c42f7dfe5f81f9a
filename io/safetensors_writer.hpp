// Writes float32 tensors into a safetensors file (the format Hugging Face's loaders read): an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape and byte range, then
// the tensors' bytes back to back. The header is padded with spaces to a multiple of 8 bytes so
// that every tensor starts aligned. Written under <path>.tmp and renamed when complete.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace meshtrain::io {

struct NamedTensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<float> values;  // row-major, product(shape) of them
};

// The temporary file write_safetensors writes before renaming it to `path`.
std::string safetensors_temporary_path(const std::string& path);

// `metadata`: string pairs stored under "__metadata__". Throws InputError naming the path when it
// cannot be written (leaving no temporary file), std::invalid_argument when a tensor's values disagree with its shape.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace meshtrain::io
