// Reads one safetensors file (io/safetensors_format.hpp), memory-mapped: opening parses and checks
// the header; reading a tensor touches only that tensor's bytes and widens them into the caller's
// buffer (F32 copied, BF16 and F16 widened exactly), so a model is never held twice.
//
// Every fault is an InputError naming the file and, where one is at fault, the tensor: a file
// shorter than 8 bytes, a header length past the end of the file or above max_header_bytes, a header
// that is not a JSON object, a __metadata__ that is not a map of strings, an entry without dtype,
// shape or data_offsets or with values of the wrong type, a dtype other than F32, BF16, F16,
// data_offsets ending before they begin or past the end of the file (a truncated file), a byte
// length other than product(shape) · dtype size, and tensors that overlap, leave a gap, or leave
// bytes after the last one (the data region must be tiled exactly, as the format's reference
// implementation requires).
#pragma once

#include "io/file_mapping.hpp"
#include "io/safetensors_format.hpp"

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace meshtrain::io {

// One tensor's header entry.
struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::f32;
  std::vector<std::uint64_t> shape;  // [] for a scalar
  std::uint64_t begin = 0, end = 0;  // its bytes in the data region (which starts after the header)

  std::uint64_t elements() const;
  bool operator==(const SafetensorsTensor&) const = default;
};

// "[2, 3]", for messages.
std::string shape_text(const std::vector<std::uint64_t>& shape);

class SafetensorsFile {
 public:
  // Maps and checks the file; InputError naming it (and the tensor) otherwise.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Every tensor, sorted by name.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // The tensor named so, or nullptr.
  const SafetensorsTensor* find(const std::string& name) const;
  // The tensor named so; InputError naming the file and the tensor when it holds none.
  const SafetensorsTensor& tensor(const std::string& name) const;

  // Tensor `name`'s values, row-major, converted exactly to float or double. `out` must hold
  // exactly its elements (std::invalid_argument otherwise: a caller checks the shape first).
  void read(const std::string& name, std::span<float> out) const;
  void read(const std::string& name, std::span<double> out) const;

 private:
  template <class T>
  void read_into(const std::string& name, std::span<T> out) const;

  std::string path_;
  FileMapping map_;
  std::uint64_t data_start_ = 0;  // 8 + the header length
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensor> tensors_;
};

}  // namespace meshtrain::io
