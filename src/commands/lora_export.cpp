// PEFT export and merged export of LoRA adapters (commands/lora_export.hpp).
#include "commands/lora_export.hpp"
#include "commands/output_directory.hpp"

#include "checkpoint/base_identity.hpp"
#include "core/errors.hpp"
#include "hf/peft_adapter.hpp"
#include "io/checkpoint/checksum_verifier.hpp"
#include "io/checkpoint/file.hpp"
#include "io/checkpoint/schema.hpp"
#include "io/checkpoint/tensor_checksum.hpp"
#include "io/output_guard.hpp"
#include "io/staged_files.hpp"

#include <fmt/format.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>

namespace meshtrain {

namespace {

namespace fs = std::filesystem;
namespace schema = io::schema;

// Tensor `t` of /model read whole into `out` and verified against its stored checksum.
void read_verified(const io::CheckpointReader& reader, const ModelTensor& t, std::span<float> out) {
  const std::string dataset = schema::dataset(schema::model_group, t.name);
  reader.read(io::TensorSlab::whole(dataset, t.shape), out.data());
  io::verify_checksums(
      reader, {dataset}, [&](std::size_t) { return io::tensor_checksum(out.data(), out.size()); },
      schema::requires_checksums(reader));
}

std::vector<float> read_verified(const io::CheckpointReader& reader, const ModelTensor& t) {
  std::uint64_t n = 1;
  for (auto d : t.shape) n *= d;
  std::vector<float> values(n);
  read_verified(reader, t, values);
  return values;
}

// W += s · B [out, r] · A [r, in], each output's delta summed in double, then rounded once: W [out, in]
// (torch Linear, llama), or W [in, out] (`conv1d`: gpt2's Conv1D, which takes the delta transposed).
void merge_into(std::span<float> w, const std::vector<float>& a, const std::vector<float>& b, std::uint64_t out,
                std::uint64_t in, std::uint64_t r, double s, bool conv1d) {
  std::vector<double> delta(in);
  for (std::uint64_t o = 0; o < out; ++o) {
    std::fill(delta.begin(), delta.end(), 0.0);
    for (std::uint64_t k = 0; k < r; ++k) {
      const double bk = s * double(b[o * r + k]);
      const float* a_row = a.data() + k * in;
      for (std::uint64_t i = 0; i < in; ++i) delta[i] += bk * double(a_row[i]);
    }
    for (std::uint64_t i = 0; i < in; ++i) {
      float& wi = conv1d ? w[i * out + o] : w[o * in + i];
      wi = float(double(wi) + delta[i]);
    }
  }
}

// What base_model_name_or_path says: the base file's path, as the file or its checkpoint recorded it.
std::string base_name(const io::CheckpointReader& reader, const LoraFile& file) {
  if (file.holds_base) return fs::absolute(reader.path()).lexically_normal().string();
  if (auto recorded = reader.string_attribute(schema::attr::lora_base)) return *recorded;
  return file.config.checkpoint.init_weights;
}

// PEFT names the adapters after the Hugging Face model's modules: `model` must have a Hugging Face
// architecture, refused as `export --format hf` refuses it otherwise (a model with shared experts, ...).
hf::Architecture peft_architecture(const ModelConfig& model) {
  try {
    return hf::export_architecture(model);
  } catch (const InputError& e) {
    input_error("--format peft names the adapters after a Hugging Face model's modules, and {}", e.what());
  }
}

}  // namespace

void export_peft(const io::CheckpointReader& reader, const std::string& dir) {
  const LoraFile file = checked_lora_file(reader, "--format peft");
  const hf::Architecture architecture = peft_architecture(file.config.model);
  // The outputs checked before anything is written: none of them the checkpoint.
  const std::string weights = (fs::path(dir) / hf::peft_weights_file).string();
  const std::string config = (fs::path(dir) / hf::peft_config_file).string();
  const std::vector<io::NamedPath> inputs = {{"the checkpoint", reader.path()}};
  io::require_safe_output(
      {"--out", weights, io::FileKind::safetensors, false, {io::safetensors_temporary_path(weights)}}, inputs);
  io::require_safe_output({"--out", config, io::FileKind::other, false, {io::staged_temporary_path(config)}}, inputs);
  if (fs::exists(dir) && !fs::is_directory(dir)) input_error("--out '{}' is not a directory", dir);

  std::vector<io::NamedTensor> tensors;
  for (const AdaptedWeight& w : file.adapted) {
    for (const ModelTensor* t : {&w.a, &w.b}) {
      tensors.push_back({hf::peft_tensor_name(architecture, t->name), t->shape, read_verified(reader, *t)});
    }
  }
  CreatedDirectory created_dir(dir);
  const nlohmann::json json = hf::peft_config_json(file.config.model, base_name(reader, file));
  io::StagedFiles beside("PEFT adapter config");
  beside.write(config, [&](const auto& append) { append(json.dump(2) + "\n"); });
  io::write_safetensors(weights, tensors, {{"format", "pt"}});
  beside.commit();
  created_dir.keep();
  fmt::print("wrote {} adapter tensors from {} as a PEFT LoRA adapter (r = {} on {}) to {}\n", tensors.size(),
             reader.path(), file.config.model.lora.rank, file.config.model.lora.targets, dir);
}

MergedLoraModel::MergedLoraModel(const io::CheckpointReader& adapters)
    : adapters_(adapters), file_(checked_lora_file(adapters, "--merge-lora")) {
  if (file_.holds_base) {
    base_ = &adapters_;
    base_path_ = adapters_.path();
  } else {
    base_path_ = file_.config.checkpoint.init_weights;
    if (base_path_.empty() || !fs::is_regular_file(base_path_)) {
      input_error(
          "'{}' holds adapters only, and its base model, checkpoint.init_weights = '{}', is not there: --merge-lora "
          "needs the base it was trained on",
          adapters_.path(), base_path_);
    }
    own_base_ = std::make_unique<io::CheckpointReader>(base_path_, MPI_COMM_SELF);
    base_ = own_base_.get();
    require_base_tensors(*base_, file_.config.model, fmt::format("the model of '{}'", adapters_.path()));
  }
  if (const auto recorded = adapters_.string_attribute(schema::attr::lora_base_hash)) {
    const std::string now = base_model_hash(*base_);
    if (now != *recorded) {
      input_error(
          "'{}' was trained on a base model of identity {} ({}), but '{}' now has identity {}: its tensors changed "
          "since, and the adapters would be merged into weights they were not trained on; restore the base file",
          adapters_.path(), *recorded, schema::attr::lora_base_hash, base_path_, now);
    }
  }
}

MergedLoraModel::~MergedLoraModel() = default;

std::vector<io::TensorSource> MergedLoraModel::tensors(hf::Architecture a) const {
  std::vector<io::TensorSource> sources = merged_tensors();
  for (io::TensorSource& t : sources) t.name = hf::hf_tensor_name(a, t.name);
  return sources;
}

std::vector<io::TensorSource> MergedLoraModel::merged_tensors() const {
  std::map<std::string, const AdaptedWeight*> adapted;
  for (const AdaptedWeight& w : file_.adapted) adapted.emplace(w.base.name, &w);
  const double s = file_.config.model.lora.scaling();
  const bool conv1d = file_.config.model.arch == Arch::gpt2;
  std::vector<io::TensorSource> sources;
  for (const ModelTensor& t : model_tensors(file_.config.model)) {
    const auto it = adapted.find(t.name);
    const AdaptedWeight* w = it == adapted.end() ? nullptr : it->second;
    sources.push_back({t.name, t.shape, [this, t, w, s, conv1d](std::span<float> out) {
                         read_verified(*base_, t, out);
                         if (w == nullptr) return;
                         merge_into(out, read_verified(adapters_, w->a), read_verified(adapters_, w->b), w->b.shape[0],
                                    w->a.shape[1], w->a.shape[0], s, conv1d);
                       }});
  }
  return sources;
}

}  // namespace meshtrain
