// Writes safetensors files (the format Hugging Face's loaders read, io/safetensors_format.hpp): an
// 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the tensors' bytes back to back. The header is padded with spaces to a multiple of 8
// bytes so that every tensor starts aligned. Files are written under <path>.tmp and renamed when
// complete (io/staged_files.hpp).
//
// Two entries: write_safetensors, one float32 file from tensors held in memory (`meshtrain export
// --format safetensors`); write_hf_weights, a Hugging Face model directory's weights — F32 or BF16,
// one `model.safetensors` or shards with their index — from tensors produced one at a time.
#pragma once

#include "io/safetensors_format.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace meshtrain::io {

struct NamedTensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<float> values;  // row-major, product(shape) of them
};

// The temporary file write_safetensors and write_hf_weights write before renaming it to `path`.
std::string safetensors_temporary_path(const std::string& path);

// `metadata`: string pairs stored under "__metadata__". Throws InputError naming the path when it
// cannot be written (leaving no temporary file), std::invalid_argument when a tensor's values disagree with its shape.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

// One tensor of a model written for Hugging Face tools. `fill` is called once, when the tensor's
// turn comes, with room for product(shape) floats to set, row-major: the writer holds one tensor at
// a time, so its caller need not hold the whole model either.
struct TensorSource {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::function<void(std::span<float>)> fill;
};

struct HfWeightsOptions {
  SafetensorsDtype dtype = SafetensorsDtype::f32;  // F32, or BF16 rounded to nearest even
  // A shard's tensor bytes stay within this (transformers' default max_shard_size "5GB"; its header
  // comes on top), except a tensor larger than it, which gets a shard of its own.
  std::uint64_t max_shard_bytes = 5'000'000'000;
  std::map<std::string, std::string> metadata;  // every file's __metadata__; "format": "pt" unless given
};

// The names of the files write_hf_weights writes for these tensors: `model.safetensors` when all
// fit in one shard, else `model-00001-of-0000K.safetensors`, ..., then `model.safetensors.index.json`.
// For checking the outputs before anything is written.
std::vector<std::string> hf_weights_file_names(const std::vector<TensorSource>& tensors,
                                               const HfWeightsOptions& options);

// Writes the files hf_weights_file_names names into the existing directory `dir`, in the tensors'
// order; the index holds {"metadata": {"total_size": <bytes of all tensors>}, "weight_map":
// {"<tensor>": "<shard>"}}. Every file is written and fsynced under its temporary name and only
// then are all renamed: a failure (InputError naming the file and the reason, or whatever a `fill`
// throws) leaves none of them. Afterwards, weight files of an earlier export that this one did not
// write (`model.safetensors`, the index, `model-*-of-*.safetensors`) are removed, as transformers'
// save_pretrained does, so the directory holds one model. Returns the paths written.
// std::invalid_argument for a dtype other than F32 or BF16, a zero shard size, a duplicate or empty name.
std::vector<std::string> write_hf_weights(const std::string& dir, const std::vector<TensorSource>& tensors,
                                          const HfWeightsOptions& options);

}  // namespace meshtrain::io
