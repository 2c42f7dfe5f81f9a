// What an existing file is, told by its contents (its magic, its header, or what the loader
// accepts), so that an output never replaces or appends to a file of another kind
// (io/output_guard.hpp; share/docs/usage.md, Outputs that never destroy a file).
//
// One test per kind, each reading no more than it needs: a detection, not a validation — a
// truncated token shard is still a token shard that a careless --out would destroy.
#pragma once

#include <string>
#include <string_view>

namespace meshtrain::io {

enum class FileKind {
  empty,           // no bytes: nothing to lose
  hdf5,            // an HDF5 file: a checkpoint, or another tool's data
  token_shard,     // io/token_shard.hpp's header: magic and version
  sft_shard,       // io/sft_shard.hpp's header: magic and version
  safetensors,     // an 8-byte header length, then that many bytes of JSON object
  traffic_json,    // log.traffic's JSON object ("counted", "ranks")
  metrics_jsonl,   // log.metrics' JSON lines: the first is an object with "step"
  tokenizer,       // a SentencePiece model that io::Tokenizer::load accepts
  tokenizer_json,  // a JSON object with a "model" object (io/tokenizer_json.hpp)
  config_ini,      // an INI of meshtrain's sections ([model], [train], ...): `import --ini`'s, a run's --config
  other,           // anything else (text, a config file, ...)
};

bool is_hdf5(const std::string& path);
bool is_token_shard(const std::string& path);
bool is_sft_shard(const std::string& path);
bool is_safetensors(const std::string& path);
bool is_traffic_json(const std::string& path);
bool is_metrics_jsonl(const std::string& path);
bool is_tokenizer_model(const std::string& path);
bool is_tokenizer_json_file(const std::string& path);
bool is_config_ini(const std::string& path);

// The kind of an existing regular file: the first test above that it passes, in that order (the
// ones with a magic number first, the SentencePiece parse, the tokenizer.json and the INI, the
// least specific, last).
FileKind file_kind(const std::string& path);

// "an HDF5 file (a checkpoint?)", "a token shard", ...: for messages.
std::string_view describe(FileKind kind);

}  // namespace meshtrain::io
