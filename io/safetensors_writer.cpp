// safetensors files and Hugging Face weight directories (io/safetensors_writer.hpp).
#include "io/safetensors_writer.hpp"

#include "core/errors.hpp"
#include "core/half_types.hpp"
#include "io/staged_files.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <set>
#include <stdexcept>

namespace meshtrain::io {

// The format is little-endian; values are written as the host holds them.
static_assert(std::endian::native == std::endian::little, "safetensors writing assumes a little-endian host");

namespace {

std::uint64_t element_count(const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) n *= d;
  return n;
}

std::uint64_t tensor_bytes(const TensorSource& t, SafetensorsDtype dtype) {
  return element_count(t.shape) * dtype_bytes(dtype);
}

std::string_view bytes_of(const void* data, std::size_t size) { return {static_cast<const char*>(data), size}; }

// One safetensors file of `tensors`, in order, through `append`.
void write_one_file(const StagedFiles::Append& append, const std::vector<const TensorSource*>& tensors,
                    SafetensorsDtype dtype, const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const TensorSource* t : tensors) {
    const std::uint64_t bytes = tensor_bytes(*t, dtype);
    header[t->name] = {{"dtype", dtype_name(dtype)}, {"shape", t->shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // tensors start 8-byte aligned
  const std::uint64_t length = text.size();
  append(bytes_of(&length, 8));
  append(text);

  std::vector<float> values;
  std::vector<std::uint16_t> narrowed;
  for (const TensorSource* t : tensors) {
    values.assign(element_count(t->shape), 0.0f);
    values.shrink_to_fit();  // one tensor's worth at a time, not the largest seen so far
    t->fill(std::span<float>(values));
    if (dtype == SafetensorsDtype::f32) {
      append(bytes_of(values.data(), values.size() * sizeof(float)));
      continue;
    }
    // BF16 in chunks of 1 Mi values: the narrowed copy stays small beside the tensor.
    constexpr std::size_t chunk = std::size_t(1) << 20;
    for (std::size_t begin = 0; begin < values.size(); begin += chunk) {
      const std::size_t n = std::min(chunk, values.size() - begin);
      narrowed.resize(n);
      for (std::size_t i = 0; i < n; ++i) narrowed[i] = half_detail::bf16_bits_from_float(values[begin + i]);
      append(bytes_of(narrowed.data(), n * sizeof(std::uint16_t)));
    }
  }
}

void check_names(const std::vector<TensorSource>& tensors) {
  std::set<std::string> names;
  for (const TensorSource& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second) {
      throw std::invalid_argument("safetensors: tensor name '" + t.name + "' is empty, reserved or given twice");
    }
  }
}

// Tensors in order, a new shard started whenever the next tensor would take the current one past
// the limit (transformers' rule).
std::vector<std::vector<const TensorSource*>> plan_shards(const std::vector<TensorSource>& tensors,
                                                          const HfWeightsOptions& options) {
  if (options.dtype != SafetensorsDtype::f32 && options.dtype != SafetensorsDtype::bf16) {
    throw std::invalid_argument("safetensors: weights are written as F32 or BF16, not " +
                                std::string(dtype_name(options.dtype)));
  }
  if (options.max_shard_bytes == 0) throw std::invalid_argument("safetensors: max_shard_bytes must be positive");
  std::vector<std::vector<const TensorSource*>> shards(1);
  std::uint64_t filled = 0;
  for (const TensorSource& t : tensors) {
    const std::uint64_t bytes = tensor_bytes(t, options.dtype);
    if (!shards.back().empty() && filled + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().push_back(&t);
    filled += bytes;
  }
  return shards;
}

std::vector<std::string> names_of(const std::vector<std::vector<const TensorSource*>>& shards) {
  if (shards.size() == 1) return {single_weights_file};
  std::vector<std::string> names;
  for (std::size_t i = 0; i < shards.size(); ++i) names.push_back(shard_file_name(int(i + 1), int(shards.size())));
  names.push_back(weights_index_file);
  return names;
}

// "model-<5 digits>-of-<5 digits>.safetensors", as shard_file_name spells it.
bool is_shard_name(const std::string& name) {
  const std::string example = shard_file_name(1, 1);
  if (name.size() != example.size()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const bool digit = example[i] >= '0' && example[i] <= '9';
    if (digit ? !(name[i] >= '0' && name[i] <= '9') : name[i] != example[i]) return false;
  }
  return true;
}

// Weight files of an earlier export in `dir` that this one did not write.
void remove_stale_weights(const std::string& dir, const std::vector<std::string>& written) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool weights = name == single_weights_file || name == weights_index_file || is_shard_name(name);
    if (weights && std::find(written.begin(), written.end(), name) == written.end()) {
      std::error_code ignored;
      std::filesystem::remove(entry.path(), ignored);
    }
  }
}

}  // namespace

std::string safetensors_temporary_path(const std::string& path) { return staged_temporary_path(path); }

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSource> sources;
  for (const NamedTensor& t : tensors) {
    const std::uint64_t n = element_count(t.shape);
    if (n != t.values.size()) {
      throw std::invalid_argument("safetensors: " + t.name + " has " + std::to_string(t.values.size()) +
                                  " values for a shape of " + std::to_string(n));
    }
    sources.push_back(
        {t.name, t.shape, [&t](std::span<float> out) { std::copy(t.values.begin(), t.values.end(), out.begin()); }});
  }
  check_names(sources);
  std::vector<const TensorSource*> all;
  for (const TensorSource& t : sources) all.push_back(&t);
  StagedFiles files("safetensors file");
  files.write(path,
              [&](const StagedFiles::Append& append) { write_one_file(append, all, SafetensorsDtype::f32, metadata); });
  files.commit();
}

std::vector<std::string> hf_weights_file_names(const std::vector<TensorSource>& tensors,
                                               const HfWeightsOptions& options) {
  return names_of(plan_shards(tensors, options));
}

std::vector<std::string> write_hf_weights(const std::string& dir, const std::vector<TensorSource>& tensors,
                                          const HfWeightsOptions& options) {
  check_names(tensors);
  const auto shards = plan_shards(tensors, options);
  const std::vector<std::string> names = names_of(shards);
  std::map<std::string, std::string> metadata = options.metadata;
  metadata.emplace("format", "pt");  // transformers refuses a file whose metadata lacks it

  std::vector<std::string> paths;
  for (const std::string& name : names) paths.push_back((std::filesystem::path(dir) / name).string());
  StagedFiles files("safetensors file");
  nlohmann::json weight_map = nlohmann::json::object();
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    files.write(paths[i],
                [&](const StagedFiles::Append& append) { write_one_file(append, shards[i], options.dtype, metadata); });
    for (const TensorSource* t : shards[i]) {
      weight_map[t->name] = names[i];
      total += tensor_bytes(*t, options.dtype);
    }
  }
  if (shards.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    files.write(paths.back(), [&](const StagedFiles::Append& append) { append(index.dump(2) + "\n"); });
  }
  files.commit();
  remove_stale_weights(dir, names);
  return paths;
}

}  // namespace meshtrain::io
