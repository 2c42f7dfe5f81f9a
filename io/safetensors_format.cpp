// The safetensors names and sizes (io/safetensors_format.hpp).
#include "io/safetensors_format.hpp"

#include <fmt/format.h>

namespace meshtrain::io {

const char* dtype_name(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::f32: return "F32";
    case SafetensorsDtype::bf16: return "BF16";
    case SafetensorsDtype::f16: return "F16";
  }
  return "?";
}

std::optional<SafetensorsDtype> parse_dtype(std::string_view name) {
  for (SafetensorsDtype d : {SafetensorsDtype::f32, SafetensorsDtype::bf16, SafetensorsDtype::f16}) {
    if (name == dtype_name(d)) return d;
  }
  return std::nullopt;
}

std::uint64_t dtype_bytes(SafetensorsDtype dtype) { return dtype == SafetensorsDtype::f32 ? 4 : 2; }

std::string shard_file_name(int index, int count) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index, count);
}

}  // namespace meshtrain::io
