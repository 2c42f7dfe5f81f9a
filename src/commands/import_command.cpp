// meshtrain import DIR --out WEIGHTS.h5 --ini MODEL.ini [--seq-len T]: a Hugging Face model directory
// (config.json, model.safetensors or its index and shards, the tokenizer) as initial weights in the
// checkpoint schema — usable by checkpoint.init_weights under any layout, and by `export` — and an
// INI of every [model] key with checkpoint.init_weights and data.tokenizer set (share/docs/usage.md,
// Hugging Face models). Everything is checked before anything is written; the weights are read one
// tensor at a time, so the model is never in memory twice.
// With --adapter PEFT_DIR, a PEFT LoRA adapter (commands/adapter_import.hpp) is written beside the base
// tensors and the INI gets its [lora] keys: a LoRA run started from the file continues that adapter
// (share/docs/usage.md, LoRA adapters in and out).
#include "checkpoint/attributes.hpp"
#include "checkpoint/contents.hpp"
#include "commands/adapter_import.hpp"
#include "commands/commands.hpp"
#include "core/command_line.hpp"
#include "core/errors.hpp"
#include "core/families.hpp"
#include "core/lora_targets.hpp"
#include "core/mpi_check.hpp"
#include "hf/hf_config.hpp"
#include "io/atomic_file.hpp"
#include "io/checkpoint/file.hpp"
#include "io/checkpoint/schema.hpp"
#include "io/hf_weights_reader.hpp"
#include "io/output_guard.hpp"
#include "io/output_lock.hpp"
#include "io/tokenizer.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

namespace meshtrain {

namespace {

namespace fs = std::filesystem;

// The tokenizer of a Hugging Face directory that meshtrain reads: its tokenizer.json where that is a
// byte-level BPE (GPT-2's, Llama 3's, Qwen2's), else its SentencePiece tokenizer.model (Llama 2's and
// Mistral's, whose tokenizer.json is a byte-fallback BPE); none where the directory has neither. Each
// is loaded as train will load it, so a tokenizer train would refuse is refused here (exit 2, naming
// why), not written into the INI; so is one whose ids reach past the model's vocabulary.
std::optional<io::Tokenizer> tokenizer_of(const fs::path& dir, int model_vocab) {
  std::vector<std::string> unread;  // why each file present is not one meshtrain reads
  std::optional<io::Tokenizer> chosen;
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    if (!fs::exists(dir / name)) continue;
    try {
      chosen.emplace(io::Tokenizer::load(fs::absolute(dir / name).lexically_normal().string()));
      break;
    } catch (const InputError& e) {
      unread.push_back(e.what());
    }
  }
  if (!chosen) {
    if (unread.empty()) return std::nullopt;
    input_error(
        "{}: no tokenizer meshtrain reads (a byte-level BPE tokenizer.json or a SentencePiece tokenizer.model):\n  "
        "{}",
        dir.string(), fmt::join(unread, "\n  "));
  }
  if (!unread.empty()) fmt::print("note: {}; importing {} instead\n", unread.front(), chosen->path());
  if (chosen->vocab_size() > model_vocab) {
    input_error(
        "{}: its ids reach {}, but config.json's vocab_size is {}: the model has no embedding for ids {} to {} "
        "(the tokenizer is another model's)",
        chosen->path(), chosen->vocab_size() - 1, model_vocab, model_vocab, chosen->vocab_size() - 1);
  }
  return chosen;
}

// One of the model's tensors and where its values come from.
struct Source {
  ModelTensor tensor;
  const io::SafetensorsTensor* file_tensor;
};

// Each tensor of `model` matched with the file's tensor of its Hugging Face name, shapes checked;
// every tensor of the file must be one of them, a buffer that is no parameter, or a tied model's
// lm_head.weight (returned in `tied_copy`, checked against the embedding when it is read).
std::vector<Source> match_tensors(const io::HfWeightsReader& reader, hf::Architecture a, const ModelConfig& model,
                                  const io::SafetensorsTensor*& tied_copy) {
  std::map<std::string, const io::SafetensorsTensor*> by_name;
  for (const io::SafetensorsTensor& t : reader.tensors()) {
    const std::optional<std::string> ours = hf::meshtrain_tensor_name(a, t.name);
    if (!ours) continue;
    if (const auto [it, fresh] = by_name.emplace(*ours, &t); !fresh) {
      input_error("{}: tensors '{}' and '{}' are both the model's {}: one copy of each tensor is valid",
                  reader.source(), it->second->name, t.name, *ours);
    }
  }
  std::vector<Source> sources;
  for (ModelTensor& t : model_tensors(model)) {
    const std::string theirs = hf::hf_tensor_name(a, t.name);
    const auto it = by_name.find(t.name);
    if (it == by_name.end()) {
      input_error("{}: no tensor '{}' [{}], which a {} of this config.json needs", reader.source(), theirs,
                  fmt::join(t.shape, ", "), hf::architecture_name(a));
    }
    const io::SafetensorsTensor& have = *it->second;
    // GPT-2's position table has n_positions rows; a run at a shorter seq_len keeps the first ones.
    const bool positions = a == hf::Architecture::gpt2 && t.name == "wpe.weight";
    const bool fits = positions ? have.shape.size() == 2 && have.shape[0] >= t.shape[0] && have.shape[1] == t.shape[1]
                                : have.shape == t.shape;
    if (!fits) {
      input_error("{}: tensor '{}' in {} has shape {}, but this config.json's {} needs [{}]{}", reader.source(),
                  have.name, reader.file_of(have.name), io::shape_text(have.shape), hf::architecture_name(a),
                  fmt::join(t.shape, ", "), positions ? " rows or more" : "");
    }
    sources.push_back({std::move(t), &have});
    by_name.erase(it);
  }
  tied_copy = nullptr;
  for (const auto& [ours, t] : by_name) {
    if (ours == "lm_head.weight" && model.ties_output_head()) {
      tied_copy = t;
      continue;
    }
    input_error("{}: tensor '{}' in {} is no parameter of a {} of this config.json (valid: the {} tensors it needs)",
                reader.source(), t->name, reader.file_of(t->name), hf::architecture_name(a), sources.size());
  }
  return sources;
}

// A tensor's values as the model takes them: every one finite; GPT-2's position table cut to its rows.
std::vector<float> read_values(io::HfWeightsReader& reader, const Source& s) {
  std::vector<float> values(s.file_tensor->elements());
  reader.read(s.file_tensor->name, values);
  std::uint64_t count = 1;
  for (auto d : s.tensor.shape) count *= d;
  values.resize(count);  // the first rows: row-major, so a prefix
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      input_error("{}: tensor '{}' holds a non-finite value ({}) at element {}: the weights are damaged",
                  reader.file_of(s.file_tensor->name), s.file_tensor->name, values[i], i);
    }
  }
  return values;
}

// Section `name` of an INI text, its header line included; empty when there is none.
std::string ini_section(const std::string& ini, std::string_view name) {
  const std::string header = fmt::format("[{}]\n", name);
  const std::size_t begin = ini.rfind(header, 0) == 0 ? 0 : ini.find("\n" + header);
  if (begin == std::string::npos) return "";
  const std::size_t start = begin == 0 ? 0 : begin + 1;
  const std::size_t end = ini.find("\n[", start);
  return ini.substr(start, end == std::string::npos ? std::string::npos : end + 1 - start);
}

// The [model] section of a resolved config's INI: every key, but for a family without the llama keys
// (gpt2) the keys at their defaults, among which are the llama keys, which a gpt2 run refuses even at
// their defaults once given.
std::string model_section(const Config& config) {
  const std::string ours = ini_section(config.to_ini(), "model");
  if (family_shape(config.model.arch).llama_keys) return ours;
  const std::string defaults = ini_section(Config{}.to_ini(), "model");
  std::istringstream lines(ours);
  std::string out;
  for (std::string line; std::getline(lines, line);) {
    if (line == "[model]" || defaults.find("\n" + line + "\n") == std::string::npos) out += line + "\n";
  }
  return out;
}

}  // namespace

int import_command(const Args& args, MPI_Comm comm) {
  namespace po = boost::program_options;
  const std::string usage = "meshtrain import DIR --out WEIGHTS.h5 --ini MODEL.ini [--seq-len T] [--adapter PEFT_DIR]";
  std::string out, ini, adapter_dir;
  int seq_len = 0;
  po::options_description options("meshtrain import");
  options.add_options()("out", po::value(&out), "initial weights to write (HDF5, written as OUT.tmp.PID, renamed)")(
      "ini", po::value(&ini), "the [model] keys, checkpoint.init_weights and data.tokenizer to write")(
      "seq-len", po::value(&seq_len),
      "model.seq_len to train at (default: max_position_embeddings, at most 4096; gpt2 keeps that many position rows)")(
      "adapter", po::value(&adapter_dir),
      "a PEFT LoRA adapter directory of this model (adapter_config.json, adapter_model.safetensors): its tensors "
      "written beside the base's, its [lora] keys into the INI");
  if (print_help_if_asked(args, options, usage)) return 0;
  if (args.empty() || args[0].rfind("--", 0) == 0) {
    input_error("expected a Hugging Face model directory DIR first (usage: {})", usage);
  }
  const fs::path dir = args[0];
  parse_options(Args(args.begin() + 1, args.end()), options, usage);
  if (out.empty() || ini.empty()) input_error("--out and --ini name the files to write (usage: {})", usage);
  // 0 is the option's own "not given": given, it would silently mean the default.
  const bool seq_len_given =
      std::any_of(args.begin() + 1, args.end(), [](const std::string& a) { return a.rfind("--seq-len", 0) == 0; });
  if (seq_len < 0 || (seq_len_given && seq_len == 0)) {
    input_error("--seq-len = {} is invalid: it must be >= 1 (or left out: max_position_embeddings, at most 4096)",
                seq_len);
  }
  if (!fs::is_directory(dir)) {
    input_error(
        "'{}' is not a directory: import reads a Hugging Face model directory (config.json, "
        "model.safetensors or model.safetensors.index.json and its shards)",
        dir.string());
  }
  int rank = 0;
  MESHTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank), "is the communicator valid?");
  if (rank != 0) return 0;  // one process reads and writes; the others have nothing to do

  // Everything read and checked before anything is written.
  const std::string config_path = (dir / "config.json").string();
  const hf::ImportedConfig imported = hf::read_config(config_path, seq_len);
  Config config;
  config.model = imported.model;
  const std::optional<io::Tokenizer> tokenizer = tokenizer_of(dir, imported.model.vocab);
  if (tokenizer) config.data.tokenizer = tokenizer->path();
  const std::string origin = fmt::format("the model of {}", config_path);
  config = config_from_ini(config.to_ini(), origin);  // the trainer's validation of every key
  std::optional<ImportedAdapter> adapter;
  if (!adapter_dir.empty()) {
    adapter = read_peft_adapter(adapter_dir, config.model, imported.architecture);
    config.model.lora = adapter->lora;
    // A LoRA config names its base; this file is that base, as the INI below says.
    config.checkpoint.init_weights = fs::absolute(out).lexically_normal().string();
    config = config_from_ini(config.to_ini(), fmt::format("the adapter of {}", adapter->config_path));
  }
  io::HfWeightsReader reader(dir.string());
  const io::SafetensorsTensor* tied_copy = nullptr;
  const std::vector<Source> sources = match_tensors(reader, imported.architecture, config.model, tied_copy);

  // Its weights go through a temporary of its own: two imports of one --out never mix their files.
  const std::string weights_temporary = io::atomic_temporary_path(out);
  const io::Output weights{"--out", out, io::FileKind::hdf5, false, {weights_temporary}};
  const io::Output keys{"--ini", ini, io::FileKind::config_ini, false, {io::atomic_temporary_path(ini)}};
  std::vector<io::NamedPath> inputs = {{"config.json", config_path}, {"the weights", reader.source()}};
  if (tokenizer) inputs.push_back({"the tokenizer", tokenizer->path()});
  for (const auto& t : reader.tensors()) inputs.push_back({"a weights shard", reader.file_of(t.name)});
  if (adapter) {
    inputs.push_back({"the adapter's config", adapter->config_path});
    inputs.push_back({"the adapter's weights", adapter->weights_path});
  }
  io::require_safe_output(weights, inputs);
  inputs.push_back({"--out", out});
  io::require_safe_output(keys, inputs);
  io::require_output_directory(weights);
  io::require_output_directory(keys);
  // One import at a time writes `out` and its INI: a second is refused (exit 2) while this one runs.
  const io::OutputLock lock("--out", out);

  TokenizerRecord record;
  if (tokenizer) record = {tokenizer->path(), tokenizer->content_hash()};
  std::vector<std::vector<std::uint64_t>> shapes;
  for (const Source& s : sources) shapes.push_back(s.tensor.shape);
  if (adapter) {
    for (const io::NamedTensor& t : adapter->tensors) shapes.push_back(t.shape);
  }
  // A file system that cannot take the weights (full, a quota, an I/O error) is the --out the user chose:
  // exit 2 naming it, with nothing left of it (the writer removes its temporary).
  try {
    io::CheckpointWriter writer(out, MPI_COMM_SELF, io::Transfer::independent,
                                {io::CheckpointWriter::planned_bytes(shapes), true}, weights_temporary);
    for (const auto& [name, value] : root_attributes(config, MPI_COMM_SELF, TrainingProgress{}, record)) {
      std::visit([&](const auto& v) { writer.set_attribute(name, v); }, value);
    }
    std::uint64_t parameters = 0;
    for (const Source& s : sources) {
      const std::vector<float> values = read_values(reader, s);
      if (tied_copy != nullptr && s.tensor.name == family_shape(config.model.arch).token_embedding_name) {
        std::vector<float> copy(tied_copy->elements());
        reader.read(tied_copy->name, copy);
        if (copy != values) {
          input_error(
              "{}: '{}' differs from the token embedding, but config.json ties them (tie_word_embeddings): "
              "the file is from another model",
              reader.file_of(tied_copy->name), tied_copy->name);
        }
      }
      writer.write(io::TensorSlab::whole(io::schema::dataset(io::schema::model_group, s.tensor.name), s.tensor.shape),
                   values.data());
      parameters += values.size();
    }
    std::uint64_t adapter_parameters = 0;
    if (adapter) {
      for (const io::NamedTensor& t : adapter->tensors) {
        writer.write(io::TensorSlab::whole(io::schema::dataset(io::schema::model_group, t.name), t.shape),
                     t.values.data());
        adapter_parameters += t.values.size();
      }
    }
    writer.commit();
    fmt::print("imported {} tensors ({} parameters) of {} ({}) to {}\n", sources.size(), parameters, dir.string(),
               hf::architecture_name(imported.architecture), out);
    if (adapter) {
      fmt::print("imported the LoRA adapter of {} beside them: {} tensors ({} parameters), r = {} on {}\n", adapter_dir,
                 adapter->tensors.size(), adapter_parameters, config.model.lora.rank, config.model.lora.targets);
    }
  } catch (const io::WriteFailed& e) {
    input_error("{}", e.what());
  }
  // The keys a run needs to start from the weights: the model, where they are and whose ids the data has.
  std::string text =
      fmt::format("# meshtrain import {}: {}\n", dir.string(), hf::architecture_name(imported.architecture));
  text += model_section(config);
  if (adapter) text += ini_section(config.to_ini(), "lora");
  text += fmt::format("[checkpoint]\ninit_weights = {}\n", fs::absolute(out).lexically_normal().string());
  if (tokenizer) text += fmt::format("[data]\ntokenizer = {}\n", tokenizer->path());
  try {
    io::write_file_atomically(ini, "model INI", [&](const auto& append) { append(text); });
  } catch (...) {
    fs::remove(out);  // both files or neither
    throw;
  }
  fmt::print("model keys, init_weights and tokenizer in {}\n", ini);
  return 0;
}

}  // namespace meshtrain
