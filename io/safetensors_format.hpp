// What the safetensors reader and writer agree on: the element types meshtrain reads and writes,
// their names in the JSON header, the header's size limit, and the file names of a Hugging Face
// model directory's weights (one `model.safetensors`, or shards listed by an index).
//
// A safetensors file: an 8-byte little-endian header length n, n bytes of JSON
// {"<tensor>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"<key>": "<string>"}} (optional), then the data region: the tensors' bytes,
// row-major, little-endian, at [begin, end) counted from the data region's start.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace meshtrain::io {

enum class SafetensorsDtype { f32, bf16, f16 };

// "F32", "BF16", "F16": the header's spelling.
const char* dtype_name(SafetensorsDtype dtype);
// The dtype a header names, or nothing for any other spelling ("F64", "I8", "f32", ...).
std::optional<SafetensorsDtype> parse_dtype(std::string_view name);
// Bytes per element.
std::uint64_t dtype_bytes(SafetensorsDtype dtype);
// For messages: the dtypes the reader accepts.
inline constexpr const char* readable_dtypes = "F32, BF16, F16";

// The format's own reference implementation refuses headers above 100 MB; so does meshtrain: a
// larger length is a corrupt file, not a model (a 400-tensor shard's header is about 40 KB).
inline constexpr std::uint64_t max_header_bytes = 100'000'000;

// A Hugging Face model directory's weight files (transformers' names).
inline constexpr const char* single_weights_file = "model.safetensors";
inline constexpr const char* weights_index_file = "model.safetensors.index.json";
// "model-00001-of-00003.safetensors": shard `index` (1-based) of `count`.
std::string shard_file_name(int index, int count);

}  // namespace meshtrain::io
