// The identity of the base model a LoRA checkpoint adapts (share/docs/usage.md, LoRA adapters in and
// out): a hash over the names and stored checksums of the base tensors of the file that
// checkpoint.init_weights names. A LoRA training checkpoint records it (root attribute
// lora_base_hash, io/checkpoint/schema.hpp); resuming and `export --merge-lora` compare it with the
// file as it is now, so that adapters are never applied to weights they were not trained on.
// Cheap: only names and checksum attributes are read, never tensor data.
#pragma once

#include <string>
#include <string_view>

namespace meshtrain {

namespace io {
class CheckpointReader;
}

// XXH64 (16 hex digits) over the sorted (name, stored checksum) pairs of the /model tensors of the
// file at `path` that are not adapter tensors. Adapters beside the base (an `import --adapter` file)
// leave it unchanged. InputError naming the file when it cannot be read, holds no base tensor, or a
// base tensor carries no checksum (a version-1 file, or a weights file of another tool: re-import it).
std::string base_model_hash(const std::string& path);
// The same for a file already open.
std::string base_model_hash(const io::CheckpointReader& reader);

}  // namespace meshtrain
