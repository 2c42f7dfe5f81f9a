// A Hugging Face model directory's safetensors weights (io/hf_weights_reader.hpp).
#include "io/hf_weights_reader.hpp"

#include "core/errors.hpp"
#include "core/regular_file.hpp"
#include "io/json_input.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>

namespace meshtrain::io {

namespace fs = std::filesystem;

namespace {

// An index lists a few thousand names at most (~100 KB); anything far larger is not an index.
constexpr std::uintmax_t max_index_bytes = 100'000'000;

std::string in_directory(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

bool path_exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// weight_map's values name files beside the index: nothing that leaves the directory.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

HfWeightsReader::HfWeightsReader(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    input_error("model directory {} {}: give the directory holding config.json and the safetensors weights", dir,
                path_exists(dir) ? "is not a directory" : "does not exist");
  }
  const std::string single = in_directory(dir, single_weights_file), index = in_directory(dir, weights_index_file);
  const bool has_single = path_exists(single), has_index = path_exists(index);
  if (has_single && has_index) {
    input_error("model directory {} holds both {} and {}: one of them is left from another model; remove the stale one",
                dir, single_weights_file, weights_index_file);
  }
  if (!has_single && !has_index) {
    const bool pickled = path_exists(in_directory(dir, "pytorch_model.bin")) ||
                         path_exists(in_directory(dir, "pytorch_model.bin.index.json"));
    input_error("model directory {} holds neither {} nor {} with its shards{}", dir, single_weights_file,
                weights_index_file,
                pickled ? ": it has PyTorch pickle weights (pytorch_model.bin), which meshtrain does not read; save "
                          "the model with safe_serialization=True"
                        : "");
  }
  if (has_single) {
    list_single_file();
  } else {
    list_index();
  }
}

HfWeightsReader::~HfWeightsReader() = default;

void HfWeightsReader::list_single_file() {
  source_ = in_directory(dir_, single_weights_file);
  open_ = std::make_unique<SafetensorsFile>(source_);
  open_index_ = 0;
  files_ = {source_};
  tensors_ = open_->tensors();
  file_of_.assign(tensors_.size(), 0);
}

void HfWeightsReader::list_index() {
  source_ = in_directory(dir_, weights_index_file);
  require_regular_file(source_, "safetensors index");
  std::error_code ec;
  const std::uintmax_t bytes = fs::file_size(source_, ec);
  if (!ec && bytes > max_index_bytes) {
    input_error("safetensors index {} is {} bytes, more than an index of weights ever is: is it one?", source_, bytes);
  }
  nlohmann::json index;
  try {
    index = parse_json_input(read_regular_file(source_, "safetensors index"), DuplicateKeys::refused);
  } catch (const JsonInputError& e) {
    input_error("safetensors index {} is not valid JSON ({})", source_, e.located());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    input_error(
        "safetensors index {} has no \"weight_map\" object (expected {{\"weight_map\": {{\"<tensor>\": "
        "\"<shard file>\", ...}}}})",
        source_);
  }
  // Shard file name → the tensors the index places there.
  std::map<std::string, std::vector<std::string>> listed;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string() || !plain_file_name(shard.get<std::string>())) {
      input_error("safetensors index {}, tensor '{}': its shard is {}, expected the name of a file beside the index",
                  source_, name, json_excerpt(shard));
    }
    listed[shard.get<std::string>()].push_back(name);
  }
  if (listed.empty()) input_error("safetensors index {} lists no tensors in its weight_map", source_);

  std::map<std::string, std::string> shard_of;  // tensor → the shard holding it, as found
  for (const auto& [shard, names] : listed) {
    const std::string path = in_directory(dir_, shard);
    if (!path_exists(path)) {
      input_error("shard {} is missing: the safetensors index {} places {} tensor(s) there, the first '{}'", path,
                  source_, names.size(), names.front());
    }
    SafetensorsFile file(path);
    for (const SafetensorsTensor& t : file.tensors()) {
      if (auto seen = shard_of.find(t.name); seen != shard_of.end()) {
        input_error("tensor '{}' is in two shards, {} and {} (index {})", t.name, in_directory(dir_, seen->second),
                    path, source_);
      }
      shard_of[t.name] = shard;
      tensors_.push_back(t);
      file_of_.push_back(files_.size());
    }
    files_.push_back(path);
  }
  for (const auto& [shard, names] : listed) {
    for (const std::string& name : names) {
      auto found = shard_of.find(name);
      if (found == shard_of.end() || found->second != shard) {
        input_error(
            "tensor '{}': the safetensors index {} places it in {}, which does not hold it{}", name, source_,
            in_directory(dir_, shard),
            found == shard_of.end() ? std::string() : fmt::format(" ({} does)", in_directory(dir_, found->second)));
      }
    }
  }
  const auto& weight_map = index["weight_map"];
  for (const auto& [name, shard] : shard_of) {
    if (!weight_map.contains(name)) {
      input_error("tensor '{}' is in shard {} but not in the safetensors index {}", name, in_directory(dir_, shard),
                  source_);
    }
  }
  // Sorted by name, keeping each tensor's file.
  std::vector<std::size_t> order(tensors_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return tensors_[a].name < tensors_[b].name; });
  std::vector<SafetensorsTensor> tensors;
  std::vector<std::size_t> files;
  for (std::size_t i : order) {
    tensors.push_back(std::move(tensors_[i]));
    files.push_back(file_of_[i]);
  }
  tensors_ = std::move(tensors);
  file_of_ = std::move(files);
}

const SafetensorsTensor* HfWeightsReader::find(const std::string& name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const SafetensorsTensor& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

const SafetensorsTensor& HfWeightsReader::tensor(const std::string& name) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) input_error("tensor '{}' is not among the {} tensors of {}", name, tensors_.size(), source_);
  return *t;
}

const std::string& HfWeightsReader::file_of(const std::string& name) const {
  return files_[file_of_[static_cast<std::size_t>(&tensor(name) - tensors_.data())]];
}

const SafetensorsFile& HfWeightsReader::shard_holding(const std::string& name) {
  const SafetensorsTensor& t = tensor(name);
  const std::size_t file = file_of_[static_cast<std::size_t>(&t - tensors_.data())];
  if (!open_ || open_index_ != file) {
    open_.reset();  // unmapped before the next is mapped: one shard at a time
    open_ = std::make_unique<SafetensorsFile>(files_[file]);
    open_index_ = file;
  }
  // The shard is checked again as it is mapped; it must still say what it said when listed.
  const SafetensorsTensor* now = open_->find(name);
  if (now == nullptr || !(*now == t)) {
    input_error("shard {}, tensor '{}': the file changed after {} was opened", files_[file], name, source_);
  }
  return *open_;
}

void HfWeightsReader::read(const std::string& name, std::span<float> out) { shard_holding(name).read(name, out); }
void HfWeightsReader::read(const std::string& name, std::span<double> out) { shard_holding(name).read(name, out); }

}  // namespace meshtrain::io
