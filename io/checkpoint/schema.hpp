// The checkpoint schema: every group and attribute name a meshtrain checkpoint holds, its format
// version and which versions load (share/docs/usage.md, Checkpoints). Saving, loading, `inspect`
// and `export` spell no name of their own: they take them from here.
//
// It lives in io/ because it names groups and attributes, never a model's tensors, and io's own
// writer stores two of its attributes (each dataset's checksum and the root's checksum
// algorithm). Which rank writes a tensor depends on the parallel layout, so that rule is
// ParameterLayout::counts_copy (model/parameters.hpp), the same rule that counts a tensor once
// in the gradient norm.
//
//   /                       root attributes below
//   /model/<tensor>         the fp32 weights, Hugging Face names ("h.0.attn.c_attn.weight")
//   /optim/exp_avg/<tensor>     AdamW's first moment
//   /optim/exp_avg_sq/<tensor>  AdamW's second moment
//
// Every dataset is float32 in its global shape and carries attribute `checksum` (uint64,
// io/checkpoint/tensor_checksum.hpp) from version 2 on.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshtrain::io {

class CheckpointReader;

namespace schema {

// Root attribute `format` of every meshtrain checkpoint.
inline constexpr const char* format_name = "meshtrain-checkpoint";
// Version 2: every dataset carries a checksum, and samples_seen gives the data position.
// Version 1 (no checksums, no samples_seen) gives weights (checkpoint.init_weights) but cannot
// be resumed, as resuming verifies every checksum.
inline constexpr std::int64_t version = 2;
inline constexpr std::int64_t first_checksummed_version = 2;
// The versions this build reads: first_readable_version through version.
inline constexpr std::int64_t first_readable_version = 1;

// Groups. The flat training states in the order TrainingTensors lists them.
inline constexpr const char* model_group = "/model";
inline constexpr const char* optim_group = "/optim";
inline constexpr const char* exp_avg_group = "/optim/exp_avg";
inline constexpr const char* exp_avg_sq_group = "/optim/exp_avg_sq";
inline constexpr std::array<const char*, 3> state_groups = {model_group, exp_avg_group, exp_avg_sq_group};

// Root attributes.
namespace attr {
inline constexpr const char* format = "format";              // string: format_name
inline constexpr const char* version = "version";            // int: schema::version
inline constexpr const char* step = "step";                  // int: completed optimizer steps
inline constexpr const char* tokens = "tokens";              // int: tokens consumed
inline constexpr const char* samples_seen = "samples_seen";  // int: sequences consumed (v2)
inline constexpr const char* config = "config";              // string: the resolved config, INI
inline constexpr const char* layout = "layout";              // string: "world=.. dp=.. tp=.. pp=.. zero=.."
inline constexpr const char* seed = "seed";                  // int: train.seed
inline constexpr const char* data_order = "data_order";      // string: data.order
inline constexpr const char* loss_scale = "loss_scale";      // real: fp16's dynamic loss scale
inline constexpr const char* loss_scale_clean_steps = "loss_scale_clean_steps";  // int: its clean steps
inline constexpr const char* checksum_algorithm = "checksum_algorithm";          // string: io::checksum_algorithm
// The tokenizer of the data (data.tokenizer), where one was set; without them a checkpoint is byte-level.
inline constexpr const char* tokenizer = "tokenizer";              // string: the model file's path, as given
inline constexpr const char* tokenizer_xxh64 = "tokenizer_xxh64";  // string: its bytes' XXH64, 16 hex digits
inline constexpr const char* model_family = "model_family";        // string: model.arch ("gpt2", "llama")
// A LoRA checkpoint (adapters only under /model): the base model it adapts, checkpoint.init_weights as
// given, and that file's base identity (checkpoint/base_identity.hpp), 16 hex digits.
inline constexpr const char* lora_base = "lora_base";            // string: the base file's path
inline constexpr const char* lora_base_hash = "lora_base_hash";  // string: base_model_hash of it
}  // namespace attr

// The family of meshtrain checkpoints written before attr::model_family: GPT-2, the only one then.
inline constexpr const char* family_before_attribute = "gpt2";

// The attribute every dataset carries (uint64).
inline constexpr const char* checksum_attribute = "checksum";

// "/model" + "wte.weight" -> "/model/wte.weight".
inline std::string dataset(const char* group, const std::string& tensor) { return std::string(group) + "/" + tensor; }

// Whether a file must carry a checksum on every dataset: a meshtrain checkpoint of
// first_checksummed_version or later (files from other tools, and older ones, carry none).
bool requires_checksums(const CheckpointReader& reader);

// Refuses a meshtrain checkpoint whose `version` this build does not read (a newer build's file,
// or a damaged attribute), before anything is loaded from it: InputError naming the version found
// and the versions read. Files without the meshtrain `format` (h5py's weights) pass.
void require_known_version(const CheckpointReader& reader);

// The model family whose tensors a file holds: its model_family attribute, family_before_attribute
// for a meshtrain checkpoint without one, and nothing for a weights file from another tool (h5py),
// which says nothing of its family (its tensor names must match the model's).
std::optional<std::string> model_family(const CheckpointReader& reader);

// The tensors under /model (relative names, sorted); InputError saying what is missing when there
// are none, as in an HDF5 file that is no checkpoint or weights file.
std::vector<std::string> model_tensors(const CheckpointReader& reader);

}  // namespace schema
}  // namespace meshtrain::io
