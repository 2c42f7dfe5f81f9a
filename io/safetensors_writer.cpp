// safetensors files.
#include "io/safetensors_writer.hpp"

#include "core/errors.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace meshtrain::io {

std::string safetensors_temporary_path(const std::string& path) { return path + ".tmp"; }

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    std::uint64_t n = 1;
    for (auto d : t.shape) n *= d;
    if (n != t.values.size()) {
      throw std::invalid_argument("safetensors: " + t.name + " has " + std::to_string(t.values.size()) +
                                  " values for a shape of " + std::to_string(n));
    }
    const std::uint64_t bytes = n * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // tensors start 8-byte aligned

  const std::string tmp = safetensors_temporary_path(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) input_error("cannot create '{}': check that its directory exists and is writable", tmp);
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(std::uint64_t(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(length), 8);
    out.write(text.data(), std::streamsize(text.size()));
    // float32 little-endian, as the format requires (this code runs on little-endian hosts only).
    static_assert(sizeof(float) == 4);
    for (const NamedTensor& t : tensors) {
      out.write(reinterpret_cast<const char*>(t.values.data()), std::streamsize(t.values.size() * sizeof(float)));
    }
    out.flush();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      input_error("writing '{}' failed (disk full?)", tmp);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    input_error("cannot rename '{}' to '{}': {}", tmp, path, ec.message());
  }
}

}  // namespace meshtrain::io
