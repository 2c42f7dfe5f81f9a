// meshtrain export FILE --format safetensors --out OUT: a checkpoint's /model (whatever layout wrote
// it: the tensors are stored whole) as a safetensors file in the checkpoint's names and shapes
// (gpt2: Hugging Face GPT-2's, Conv1D [in, out]; llama: Hugging Face Llama's, [out, in]), float32,
// for other tools.
// meshtrain export FILE --format hf --out DIR [--dtype fp32|bf16]: the same tensors as a directory
// transformers loads (hf/hf_config.hpp: config.json, generation_config.json, model.safetensors or 5 GB
// shards and their index, the tokenizer's files), exactly the tensors `meshtrain import` reads.
// A file with LoRA adapters (commands/lora_export.hpp): --format peft writes the adapters as PEFT's
// adapter directory; --format hf --merge-lora the base model with the adapters merged into it.
#include "commands/commands.hpp"
#include "commands/lora_export.hpp"
#include "commands/output_directory.hpp"

#include "checkpoint/attributes.hpp"
#include "checkpoint/contents.hpp"
#include "core/command_line.hpp"
#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "core/regular_file.hpp"
#include "hf/hf_config.hpp"
#include "io/checkpoint/checksum_verifier.hpp"
#include "io/checkpoint/file.hpp"
#include "io/checkpoint/schema.hpp"
#include "io/checkpoint/tensor_checksum.hpp"
#include "io/output_guard.hpp"
#include "io/safetensors_writer.hpp"
#include "io/staged_files.hpp"
#include "io/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>

#include <boost/program_options.hpp>
#include <fmt/format.h>

namespace meshtrain {

namespace {

namespace schema = io::schema;

// Every /model tensor read whole (each checked finite by the reader) and verified against its stored
// checksum by io's one verifier, the one `inspect` and loading use, before anything is written; the
// file checked first as loading checks it (checkpoint/contents.hpp): exactly its stored
// config's tensors, in their shapes.
std::vector<io::NamedTensor> read_verified_model(const io::CheckpointReader& reader) {
  checked_stored_model(reader, /*with_optimizer=*/false);
  std::vector<io::NamedTensor> tensors;
  std::vector<std::string> datasets;
  for (const std::string& name : schema::model_tensors(reader)) {
    io::NamedTensor t;
    t.name = name;
    datasets.push_back(schema::dataset(schema::model_group, name));
    t.shape = reader.shape(datasets.back());
    std::uint64_t n = 1;
    for (auto d : t.shape) n *= d;
    t.values.resize(n);
    reader.read(io::TensorSlab::whole(datasets.back(), t.shape), t.values.data());
    tensors.push_back(std::move(t));
  }
  io::verify_checksums(
      reader, datasets,
      [&](std::size_t k) { return io::tensor_checksum(tensors[k].values.data(), tensors[k].values.size()); },
      schema::requires_checksums(reader));
  return tensors;
}

// The files of the tokenizer a checkpoint records, as Hugging Face directories ship them beside it
// (tokenizer.json or tokenizer.model, tokenizer_config.json, special_tokens_map.json): copied when the
// recorded file still has the bytes the checkpoint was trained with; none for a byte-level model.
std::vector<std::filesystem::path> tokenizer_files(const io::CheckpointReader& reader) {
  const std::optional<std::string> path = reader.string_attribute(schema::attr::tokenizer);
  const std::optional<std::string> hash = reader.string_attribute(schema::attr::tokenizer_xxh64);
  if (!path || !hash) return {};
  if (!std::filesystem::is_regular_file(*path) ||
      io::hash_hex(io::tokenizer_hash(read_regular_file(*path, "the checkpoint's tokenizer"))) != *hash) {
    input_error(
        "'{}' records the tokenizer '{}' (XXH64 {}), which is no longer there with those bytes: an export "
        "ships the tokenizer its ids mean; restore the file",
        reader.path(), *path, *hash);
  }
  std::vector<std::filesystem::path> files = {*path};
  for (const char* beside : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const auto p = std::filesystem::path(*path).parent_path() / beside;
    if (std::filesystem::is_regular_file(p)) files.push_back(p);
  }
  return files;
}

// Every tensor of `model` under architecture `a`'s names, read from the file when its turn comes and
// checked against its checksum.
std::vector<io::TensorSource> stored_tensors(const io::CheckpointReader& reader, const ModelConfig& model,
                                             hf::Architecture a) {
  std::vector<io::TensorSource> tensors;
  for (const ModelTensor& t : model_tensors(model)) {
    const std::string dataset = schema::dataset(schema::model_group, t.name);
    const bool checked = schema::requires_checksums(reader);
    tensors.push_back(
        {hf::hf_tensor_name(a, t.name), t.shape, [&reader, dataset, shape = t.shape, checked](std::span<float> out) {
           reader.read(io::TensorSlab::whole(dataset, shape), out.data());
           io::verify_checksums(
               reader, {dataset}, [&](std::size_t) { return io::tensor_checksum(out.data(), out.size()); }, checked);
         }});
  }
  return tensors;
}

// The directory `--format hf` writes: config.json, generation_config.json and the tokenizer's files
// staged first, then the weights written (and committed) one tensor at a time, each checked against
// its checksum as it is read, then the staged files committed: a failure leaves no new file. With
// `merged`, the model and its tensors are the merged LoRA model's (the file holds adapters).
void export_hf(const io::CheckpointReader& reader, const std::string& path, const std::string& dir,
               const std::string& dtype, const MergedLoraModel* merged) {
  namespace fs = std::filesystem;
  const std::optional<Config> stored = merged != nullptr ? std::optional<Config>(merged->config())
                                                         : checked_stored_model(reader, /*with_optimizer=*/false);
  if (!stored) {
    input_error(
        "'{}' holds no meshtrain config (a weights file of another tool): --format hf needs the model's "
        "keys to write config.json; export a checkpoint, or a file of `meshtrain import`",
        path);
  }
  const ModelConfig& model = stored->model;
  const hf::Architecture architecture = hf::export_architecture(model);
  const std::vector<io::TensorSource> tensors =
      merged != nullptr ? merged->tensors(architecture) : stored_tensors(reader, model, architecture);
  io::HfWeightsOptions options;
  options.dtype = dtype == "bf16" ? io::SafetensorsDtype::bf16 : io::SafetensorsDtype::f32;
  options.metadata = {{"format", "pt"}, {"source", path}};

  // The outputs checked before anything is written: none of them the checkpoint or the tokenizer read.
  const std::vector<fs::path> tokenizer = tokenizer_files(reader);
  std::vector<io::NamedPath> inputs = {{"the checkpoint", path}};
  if (merged != nullptr) inputs.push_back({"the base model", merged->base_path()});
  for (const fs::path& p : tokenizer) inputs.push_back({"the tokenizer", p.string()});
  std::vector<io::Output> outputs;
  for (const std::string& name : io::hf_weights_file_names(tensors, options)) {
    const std::string p = (fs::path(dir) / name).string();
    // The weights are safetensors files, their index a JSON text: an earlier export's are replaced.
    const io::FileKind kind = name.ends_with(".safetensors") ? io::FileKind::safetensors : io::FileKind::other;
    outputs.push_back({"--out", p, kind, false, {io::safetensors_temporary_path(p)}});
  }
  // Beside them JSON texts, and the tokenizer's files copied, each of its source's kind: an earlier export's
  // copies are replaced, a file of another kind under their names refused.
  std::vector<std::pair<std::string, io::FileKind>> written_beside = {{"config.json", io::FileKind::other},
                                                                      {"generation_config.json", io::FileKind::other}};
  for (const fs::path& p : tokenizer) written_beside.emplace_back(p.filename().string(), io::file_kind(p.string()));
  for (const auto& [name, kind] : written_beside) {
    const std::string p = (fs::path(dir) / name).string();
    outputs.push_back({"--out", p, kind, false, {io::staged_temporary_path(p)}});
  }
  for (const io::Output& o : outputs) io::require_safe_output(o, inputs);
  if (fs::exists(dir) && !fs::is_directory(dir)) input_error("--out '{}' is not a directory", dir);
  CreatedDirectory created_dir(dir);

  const std::string torch_dtype = dtype == "bf16" ? "bfloat16" : "float32";
  const nlohmann::json config = hf::config_json(model, torch_dtype);
  const nlohmann::json generation = {
      {"_from_model_config", true}, {"bos_token_id", config["bos_token_id"]}, {"eos_token_id", config["eos_token_id"]}};
  io::StagedFiles beside("Hugging Face model file");
  beside.write((fs::path(dir) / "config.json").string(), [&](const auto& append) { append(config.dump(2) + "\n"); });
  beside.write((fs::path(dir) / "generation_config.json").string(),
               [&](const auto& append) { append(generation.dump(2) + "\n"); });
  for (const fs::path& p : tokenizer) {
    const std::string bytes = read_regular_file(p.string(), "the tokenizer");
    beside.write((fs::path(dir) / p.filename()).string(), [&](const auto& append) { append(bytes); });
  }
  const std::vector<std::string> weights = io::write_hf_weights(dir, tensors, options);
  beside.commit();
  created_dir.keep();
  fmt::print("wrote {} tensors from {}{} as a Hugging Face {} ({}, {} weight file{}) to {}\n", tensors.size(), path,
             merged != nullptr ? fmt::format(" (LoRA merged into the base {})", merged->base_path()) : "",
             hf::architecture_name(architecture), torch_dtype, weights.size(), weights.size() == 1 ? "" : "s", dir);
}

// Refuses a file with LoRA adapters for a format that would leave them out or fail on them.
void refuse_adapters(const io::CheckpointReader& reader, std::string_view format) {
  if (!stored_config_has_lora(reader)) return;
  input_error(
      "'{}' holds LoRA adapters (its stored config has lora.rank > 0), which --format {} would not carry: export "
      "them with --format peft, or the merged model with --format hf --merge-lora",
      reader.path(), format);
}

}  // namespace

int export_command(const Args& args, MPI_Comm comm) {
  namespace po = boost::program_options;
  const std::string usage =
      "meshtrain export FILE --format safetensors|hf|peft --out OUT [--dtype fp32|bf16] [--merge-lora]";
  std::string format, out, dtype = "fp32";
  bool merge_lora = false;
  po::options_description options("meshtrain export");
  options.add_options()("format", po::value(&format),
                        "output format: safetensors (one file), hf (a Hugging Face model directory) or peft (a LoRA "
                        "file's adapters as a PEFT adapter directory)")(
      "out", po::value(&out), "safetensors: the file to write (as OUT.tmp, renamed when complete); hf: the directory")(
      "dtype", po::value(&dtype), "hf: the weights' type, fp32 (exact) or bf16 (rounded to nearest even)")(
      "merge-lora", po::bool_switch(&merge_lora),
      "hf: a LoRA file's adapters merged into its base model, W + s·B·A (in fp32, then cast to --dtype)");
  if (print_help_if_asked(args, options, usage)) return 0;
  if (args.empty() || args[0].rfind("--", 0) == 0) input_error("expected a checkpoint FILE first (usage: {})", usage);
  const std::string path = args[0];
  parse_options(Args(args.begin() + 1, args.end()), options, usage);
  if (format != "safetensors" && format != "hf" && format != "peft") {
    input_error("--format = '{}' is invalid: valid formats are safetensors, hf and peft (usage: {})", format, usage);
  }
  if (out.empty()) input_error("--out is missing: name the file or directory to write (usage: {})", usage);
  if (dtype != "fp32" && dtype != "bf16") input_error("--dtype = '{}' is invalid: valid are fp32 and bf16", dtype);
  if (format != "hf" && dtype != "fp32") input_error("--dtype is for --format hf; {} is fp32", format);
  if (merge_lora && format != "hf") input_error("--merge-lora is for --format hf (a merged Hugging Face model)");
  if (format == "hf" || format == "peft") {
    int rank = 0;
    MESHTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank), "is the communicator valid?");
    io::CheckpointReader reader(path, comm);
    if (rank != 0) return 0;
    if (format == "peft") {
      export_peft(reader, out);
    } else if (merge_lora) {
      const MergedLoraModel merged(reader);
      export_hf(reader, path, out, dtype, &merged);
    } else {
      refuse_adapters(reader, format);
      export_hf(reader, path, out, dtype, nullptr);
    }
    return 0;
  }
  // Before anything is read: the output must not replace the checkpoint, a directory or a file
  // that is not a safetensors file.
  const io::Output safetensors{"--out", out, io::FileKind::safetensors, false, {io::safetensors_temporary_path(out)}};
  io::require_safe_output(safetensors, {{"the checkpoint", path}});
  io::require_output_directory(safetensors);

  io::CheckpointReader reader(path, comm);
  int rank = 0;
  MESHTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank), "is the communicator valid?");
  if (rank != 0) return 0;
  refuse_adapters(reader, format);
  const std::vector<io::NamedTensor> tensors = read_verified_model(reader);
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"source", path}};
  if (auto step = reader.int_attribute(schema::attr::step)) metadata[schema::attr::step] = std::to_string(*step);
  if (auto family = schema::model_family(reader)) metadata[schema::attr::model_family] = *family;
  io::write_safetensors(out, tensors, metadata);
  fmt::print("wrote {} tensors from {} to {}\n", tensors.size(), path, out);
  return 0;
}

}  // namespace meshtrain
