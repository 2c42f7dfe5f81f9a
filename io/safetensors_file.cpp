// One safetensors file read through a mapping (io/safetensors_file.hpp).
#include "io/safetensors_file.hpp"

#include "core/errors.hpp"
#include "core/half_types.hpp"
#include "io/json_input.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>

namespace meshtrain::io {

// The file's bytes are little-endian and copied as they are.
static_assert(std::endian::native == std::endian::little, "safetensors reading assumes a little-endian host");

std::uint64_t SafetensorsTensor::elements() const {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

namespace {

using json = nlohmann::json;

// "safetensors file <path>, tensor '<name>'": how every message about one entry begins.
std::string where(const std::string& path, const std::string& name) {
  return fmt::format("safetensors file {}, tensor '{}'", path, name);
}

std::uint64_t unsigned_field(const std::string& path, const std::string& name, const json& value, const char* key) {
  if (!value.is_number_unsigned()) {
    input_error("{}: {} holds {}, expected non-negative integers", where(path, name), key, json_excerpt(value));
  }
  return value.get<std::uint64_t>();
}

SafetensorsTensor parse_entry(const std::string& path, const std::string& name, const json& entry,
                              std::uint64_t data_bytes) {
  if (!entry.is_object()) {
    input_error("{}: the entry is {}, expected an object with dtype, shape and data_offsets", where(path, name),
                json_excerpt(entry));
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) {
      input_error("{}: the key '{}' is missing (every tensor needs dtype, shape and data_offsets)", where(path, name),
                  key);
    }
  }
  SafetensorsTensor t;
  t.name = name;
  const json& dtype = entry["dtype"];
  const auto parsed = dtype.is_string() ? parse_dtype(dtype.get<std::string>()) : std::nullopt;
  if (!parsed) {
    input_error("{}: dtype {} is not supported: valid dtypes are {}", where(path, name), json_excerpt(dtype),
                readable_dtypes);
  }
  t.dtype = *parsed;
  const json& shape = entry["shape"];
  if (!shape.is_array())
    input_error("{}: shape holds {}, expected an array of sizes", where(path, name), json_excerpt(shape));
  std::uint64_t elements = 1;
  for (const json& d : shape) {
    t.shape.push_back(unsigned_field(path, name, d, "shape"));
    if (__builtin_mul_overflow(elements, t.shape.back(), &elements)) {
      input_error("{}: shape {} has more elements than 2^64", where(path, name), json_excerpt(shape));
    }
  }
  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    input_error("{}: data_offsets holds {}, expected [begin, end]", where(path, name), json_excerpt(offsets));
  }
  t.begin = unsigned_field(path, name, offsets[0], "data_offsets");
  t.end = unsigned_field(path, name, offsets[1], "data_offsets");
  if (t.end < t.begin)
    input_error("{}: data_offsets [{}, {}] end before they begin", where(path, name), t.begin, t.end);
  if (t.end > data_bytes) {
    input_error(
        "{}: data_offsets [{}, {}] reach past the end of the file, whose data region holds {} bytes: the file is "
        "truncated or its header lies",
        where(path, name), t.begin, t.end, data_bytes);
  }
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(elements, dtype_bytes(t.dtype), &bytes) || bytes != t.end - t.begin) {
    input_error("{}: data_offsets [{}, {}] hold {} bytes, but dtype {} and shape {} need {} · {} bytes",
                where(path, name), t.begin, t.end, t.end - t.begin, dtype_name(t.dtype), shape_text(t.shape), elements,
                dtype_bytes(t.dtype));
  }
  return t;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& metadata) {
  if (!metadata.is_object()) {
    input_error("safetensors file {}: __metadata__ is {}, expected an object of strings", path, json_excerpt(metadata));
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : metadata.items()) {
    if (!value.is_string()) {
      input_error("safetensors file {}: __metadata__ key '{}' holds {}, expected a string", path, key,
                  json_excerpt(value));
    }
    out[key] = value.get<std::string>();
  }
  return out;
}

// The data region must be tiled exactly: sorted by offset, each tensor begins where the previous
// one ended, the first at 0 and the last ending at the end of the file.
void check_tiling(const std::string& path, std::vector<SafetensorsTensor> tensors, std::uint64_t data_bytes) {
  std::sort(tensors.begin(), tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& t : tensors) {
    if (previous != nullptr && t.begin < previous->end) {
      input_error("safetensors file {}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap: its header lies", path,
                  previous->name, previous->begin, previous->end, t.name, t.begin, t.end);
    }
    if (t.begin > covered) {
      input_error("{}: data_offsets begin at {}, leaving bytes [{}, {}) {} unused: its header lies",
                  where(path, t.name), t.begin, covered, t.begin,
                  previous ? fmt::format("after tensor '{}'", previous->name) : std::string("at the start"));
    }
    covered = t.end;
    previous = &t;
  }
  if (covered != data_bytes) {
    input_error("safetensors file {}: {} bytes follow the last tensor{}: its header lies or the file was appended to",
                path, data_bytes - covered, previous ? fmt::format(" ('{}')", previous->name) : std::string());
  }
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), map_(path, "safetensors file") {
  const std::uint64_t size = map_.size();
  if (size < 8) {
    input_error("safetensors file {} is {} bytes, shorter than the 8-byte header length a safetensors file starts with",
                path, size);
  }
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, map_.data(), 8);
  if (header_bytes > max_header_bytes) {
    input_error(
        "safetensors file {}: its header length {} is above the format's limit of {} bytes: the file is "
        "corrupt or not a safetensors file",
        path, header_bytes, max_header_bytes);
  }
  if (header_bytes > size - 8) {
    input_error(
        "safetensors file {}: its header length {} reaches past the end of the file ({} bytes): the file is "
        "truncated or its header length lies",
        path, header_bytes, size);
  }
  data_start_ = 8 + header_bytes;
  const auto* text = reinterpret_cast<const char*>(map_.data() + 8);
  json header;
  try {
    header = parse_json_input(std::string_view(text, header_bytes), DuplicateKeys::refused);
  } catch (const JsonInputError& e) {
    input_error(
        "safetensors file {}: its {}-byte header is not valid JSON ({}): the file is corrupt or its header "
        "length lies",
        path, header_bytes, e.located());
  }
  if (!header.is_object()) {
    input_error("safetensors file {}: its header is {}, expected a JSON object of tensors", path, header.type_name());
  }
  const std::uint64_t data_bytes = size - data_start_;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      metadata_ = parse_metadata(path, entry);
    } else {
      tensors_.push_back(parse_entry(path, name, entry, data_bytes));
    }
  }
  check_tiling(path, tensors_, data_bytes);
  // nlohmann's objects iterate in key order: tensors_ is sorted by name.
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const SafetensorsTensor& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

const SafetensorsTensor& SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) input_error("{}: no such tensor in the file ({} tensors)", where(path_, name), tensors_.size());
  return *t;
}

template <class T>
void SafetensorsFile::read_into(const std::string& name, std::span<T> out) const {
  const SafetensorsTensor& t = tensor(name);
  if (out.size() != t.elements()) {
    throw std::invalid_argument(fmt::format("{}: a buffer of {} values given for its {} elements (shape {})",
                                            where(path_, name), out.size(), t.elements(), shape_text(t.shape)));
  }
  const unsigned char* bytes = map_.data() + data_start_ + t.begin;
  // memcpy per element: the data region need not be aligned (the format pads headers to 8 bytes,
  // but not every writer does).
  auto widen = [&](auto load) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(load(i));
  };
  auto half_bits = [&](std::size_t i) {
    std::uint16_t b;
    std::memcpy(&b, bytes + 2 * i, 2);
    return b;
  };
  switch (t.dtype) {
    case SafetensorsDtype::f32:
      widen([&](std::size_t i) {
        float f;
        std::memcpy(&f, bytes + 4 * i, 4);
        return f;
      });
      break;
    case SafetensorsDtype::bf16:
      widen([&](std::size_t i) { return half_detail::float_from_bf16_bits(half_bits(i)); });
      break;
    case SafetensorsDtype::f16:
      widen([&](std::size_t i) { return half_detail::float_from_fp16_bits(half_bits(i)); });
      break;
  }
}

void SafetensorsFile::read(const std::string& name, std::span<float> out) const { read_into(name, out); }
void SafetensorsFile::read(const std::string& name, std::span<double> out) const { read_into(name, out); }

}  // namespace meshtrain::io
