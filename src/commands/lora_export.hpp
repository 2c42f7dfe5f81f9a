// The LoRA side of `meshtrain export` (share/docs/usage.md, LoRA adapters in and out), for a LoRA
// training checkpoint or an `import --adapter` file (checkpoint/lora_contents.hpp):
//   --format peft     the adapters as PEFT's adapter_config.json and adapter_model.safetensors
//   --merge-lora      (with --format hf) the base model with every adapted weight merged,
//                     W' = W + s · B A, as a Hugging Face directory
// Every tensor is verified against its stored checksum as it is read.
#pragma once

#include "checkpoint/lora_contents.hpp"
#include "hf/hf_config.hpp"
#include "io/safetensors_writer.hpp"

#include <memory>
#include <string>
#include <vector>

namespace meshtrain {

namespace io {
class CheckpointReader;
}

// Writes `dir`/adapter_config.json and `dir`/adapter_model.safetensors (float32, PEFT's names and
// shapes) for the file `reader` reads: both or neither. InputError naming the file when it holds no
// adapters, or the output when it cannot be written.
void export_peft(const io::CheckpointReader& reader, const std::string& dir);

// The merged model of a file with adapters: its base tensors from the file itself when it holds them,
// else from the file its stored checkpoint.init_weights names, which must hold the base model's
// tensors and, where the checkpoint records lora_base_hash, still have that identity
// (checkpoint/base_identity.hpp). Checked on construction: InputError naming the file at fault.
class MergedLoraModel {
 public:
  explicit MergedLoraModel(const io::CheckpointReader& adapters);
  ~MergedLoraModel();
  MergedLoraModel(const MergedLoraModel&) = delete;
  MergedLoraModel& operator=(const MergedLoraModel&) = delete;

  const Config& config() const { return file_.config; }
  // The file the base tensors come from.
  const std::string& base_path() const { return base_path_; }
  // Every tensor of the base model under architecture `a`'s names, in the model's order, filled when
  // written: a base tensor as stored; an adapted weight W + s · B A, the product and sum taken in
  // double and rounded once to float32 (s = alpha / r, alpha / √r under rslora).
  std::vector<io::TensorSource> tensors(hf::Architecture a) const;
  // The same under meshtrain's names (`sample` computes with the merged model).
  std::vector<io::TensorSource> merged_tensors() const;

 private:
  const io::CheckpointReader& adapters_;
  LoraFile file_;
  std::string base_path_;
  std::unique_ptr<io::CheckpointReader> own_base_;  // when the base is another file
  const io::CheckpointReader* base_ = nullptr;
};

}  // namespace meshtrain
