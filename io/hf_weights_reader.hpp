// Reads a Hugging Face model directory's weights: `model.safetensors`, or
// `model.safetensors.index.json` ({"metadata": {...}, "weight_map": {"<tensor>": "<shard file>"}})
// with the shards it lists. Opening reads every header and checks that the index and the shards
// agree; reading maps one shard at a time (the one holding the tensor asked for, unmapped when a
// tensor of another shard is read), so a model of any size is read shard by shard.
//
// Faults, each an InputError naming the files and the tensor: a directory with neither file or
// with both (a stale export), an index that is not JSON or has no weight_map of strings, a shard
// name that is not a plain file name, a missing shard, a tensor the index lists but its shard does
// not hold, a tensor a shard holds but the index does not list (or places in another shard), the
// same tensor in two shards, and every fault of one file (io/safetensors_file.hpp).
#pragma once

#include "io/safetensors_file.hpp"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace meshtrain::io {

class HfWeightsReader {
 public:
  explicit HfWeightsReader(const std::string& dir);
  ~HfWeightsReader();
  HfWeightsReader(const HfWeightsReader&) = delete;
  HfWeightsReader& operator=(const HfWeightsReader&) = delete;

  const std::string& directory() const { return dir_; }
  // The file the tensors were listed from: <dir>/model.safetensors or <dir>/model.safetensors.index.json.
  const std::string& source() const { return source_; }
  // Every tensor of every shard, sorted by name.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // The tensor named so, or nullptr.
  const SafetensorsTensor* find(const std::string& name) const;
  // The tensor named so; InputError naming source() and the tensor when there is none.
  const SafetensorsTensor& tensor(const std::string& name) const;
  // The path of the file that holds it.
  const std::string& file_of(const std::string& name) const;

  // Tensor `name`'s values, as SafetensorsFile::read gives them; maps its shard if another is mapped.
  void read(const std::string& name, std::span<float> out);
  void read(const std::string& name, std::span<double> out);

 private:
  const SafetensorsFile& shard_holding(const std::string& name);
  void list_single_file();
  void list_index();

  std::string dir_, source_;
  std::vector<SafetensorsTensor> tensors_;  // sorted by name
  std::vector<std::size_t> file_of_;        // index into files_, parallel to tensors_
  std::vector<std::string> files_;
  std::size_t open_index_ = 0;
  std::unique_ptr<SafetensorsFile> open_;  // the one mapped file, files_[open_index_]
};

}  // namespace meshtrain::io
