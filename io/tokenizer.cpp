// The SentencePiece calls behind io/tokenizer.hpp, and the training options they are made with; a
// tokenizer.json goes to io/tokenizer_json.hpp.
#include "io/tokenizer.hpp"

#include "core/errors.hpp"
#include "core/regular_file.hpp"
#include "io/tokenizer_json.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <xxhash.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <unordered_map>

namespace meshtrain::io {

struct Tokenizer::Model {
  sentencepiece::SentencePieceProcessor processor;
  std::optional<TokenizerJson> json;  // set for a tokenizer.json: then the processor is unused
};

namespace {

// SentencePiece's reason without its source location: "Internal: ./src/x.cc(580) [check] reason".
std::string reason(const sentencepiece::util::Status& status) {
  const std::string text = status.ToString();
  const auto end_of_check = text.find("] ");
  return end_of_check == std::string::npos ? text : text.substr(end_of_check + 2);
}

// The training sentences, one line at a time, as SentencePiece's trainer asks for them.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string_view>& lines) : lines_(lines) { load(); }
  bool done() const override { return at_ >= lines_.size(); }
  void Next() override {
    ++at_;
    load();
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void load() {
    if (!done()) value_.assign(lines_[at_]);
  }
  const std::vector<std::string_view>& lines_;
  std::size_t at_ = 0;
  std::string value_;
};

// The characters that get pieces of their own; the rarest rest go by their bytes.
constexpr const char* character_coverage = "0.9995";

// The trainer's options (share/docs/usage.md, Tokenizers, which gives the reasons): exact round
// trips (byte fallback, no normalisation, whitespace kept as it is), no control pieces but <unk>
// (and those of --special), and one thread with a fixed seed, so that the same text gives the same file.
// SentencePiece's own default, stated so that a refusal can name it: longer lines are skipped in training.
constexpr std::size_t max_training_line_bytes = 4192;

std::unordered_map<std::string, std::string> training_options(int vocab) {
  return {{"model_type", "bpe"},
          {"vocab_size", std::to_string(vocab)},
          {"byte_fallback", "true"},
          {"character_coverage", character_coverage},
          {"normalization_rule_name", "identity"},
          {"remove_extra_whitespaces", "false"},
          {"add_dummy_prefix", "false"},
          {"allow_whitespace_only_pieces", "true"},
          {"split_digits", "true"},
          {"unk_id", "0"},
          {"bos_id", "-1"},
          {"eos_id", "-1"},
          {"pad_id", "-1"},
          {"num_threads", "1"},
          {"max_sentence_length", std::to_string(max_training_line_bytes)},
          {"minloglevel", "1"}};  // warnings and errors only: no progress log on stderr
}

constexpr unsigned training_seed = 1337;

// The test of a SentencePiece model, the loader's and the output guard's (is_sentencepiece_model):
// the bytes parse into `processor` and the model has pieces. Empty when they do; else why not
// (never empty: SentencePiece's reason can be).
std::string parse_model(std::string_view bytes, sentencepiece::SentencePieceProcessor& processor) {
  const auto status = processor.LoadFromSerializedProto(bytes);
  if (status.ok()) return processor.GetPieceSize() > 0 ? std::string() : std::string("it has no pieces");
  const std::string why = reason(status);
  return why.empty() ? std::string("it does not parse") : why;
}

}  // namespace

Tokenizer::Tokenizer(std::string path, std::uint64_t hash, std::unique_ptr<Model> model)
    : path_(std::move(path)), hash_(hash), model_(std::move(model)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  // The bytes are read once, so the hash is of exactly the model that is parsed.
  const std::string bytes = read_regular_file(path, "tokenizer");
  auto model = std::make_unique<Model>();
  if (looks_like_json(bytes)) {
    model->json.emplace(TokenizerJson::parse(path, bytes));
    return Tokenizer(path, tokenizer_hash(bytes), std::move(model));
  }
  const std::string problem = parse_model(bytes, model->processor);
  if (!problem.empty()) {
    input_error("tokenizer '{}' is not a SentencePiece model ({}); make one with meshtrain tokenizer train", path,
                problem);
  }
  return Tokenizer(path, tokenizer_hash(bytes), std::move(model));
}

bool looks_like_json(std::string_view bytes) {
  const auto first = bytes.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && bytes[first] == '{';
}

bool is_sentencepiece_model(std::string_view bytes) {
  sentencepiece::SentencePieceProcessor processor;
  return parse_model(bytes, processor).empty();
}

bool Tokenizer::is_json() const { return model_->json.has_value(); }

int Tokenizer::vocab_size() const {
  return model_->json ? model_->json->vocab_size() : model_->processor.GetPieceSize();
}

bool Tokenizer::is_byte(int id) const {
  return model_->json ? model_->json->is_partial_character(id) : model_->processor.IsByte(id);
}

std::vector<int> Tokenizer::encode_document(std::string_view text) const {
  std::vector<int> ids = encode_document_start(text);
  if (model_->json) ids.insert(ids.end(), model_->json->suffix().begin(), model_->json->suffix().end());
  return ids;
}

std::vector<int> Tokenizer::encode_document_start(std::string_view text) const {
  if (!model_->json) return encode(text);
  std::vector<int> ids = model_->json->prefix();
  const std::vector<int> body = model_->json->encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::vector<int> Tokenizer::encode_text(std::string_view text) const {
  return model_->json ? model_->json->encode_text(text) : encode(text);
}

std::optional<int> Tokenizer::special_token_id(std::string_view token) const {
  if (model_->json) return model_->json->special_token(token);
  const int id = model_->processor.PieceToId(token);
  if (id < 0 || model_->processor.IdToPiece(id) != token || !model_->processor.IsControl(id)) return std::nullopt;
  return id;
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  if (model_->json) return model_->json->encode(text);
  std::vector<int> ids;
  const auto status = model_->processor.Encode(text, &ids);
  if (!status.ok()) throw std::runtime_error(fmt::format("tokenizer '{}': encoding failed: {}", path_, reason(status)));
  return ids;
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  for (int id : ids) {
    if (id < 0 || id >= vocab_size()) {
      input_error("token {} is outside tokenizer '{}' (ids 0 to {})", id, path_, vocab_size() - 1);
    }
  }
  if (model_->json) return model_->json->decode(ids);
  std::string text;
  const auto status = model_->processor.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) throw std::runtime_error(fmt::format("tokenizer '{}': decoding failed: {}", path_, reason(status)));
  return text;
}

std::uint64_t tokenizer_hash(std::string_view file_bytes) { return XXH64(file_bytes.data(), file_bytes.size(), 0); }

std::string hash_hex(std::uint64_t hash) { return fmt::format("{:016x}", hash); }

std::string train_bpe_model(const std::vector<std::string_view>& lines, int vocab,
                            const std::vector<std::string>& special) {
  sentencepiece::SetRandomGeneratorSeed(training_seed);
  LineIterator iterator(lines);
  auto options = training_options(vocab);
  // Chat templates' tokens (tokenizer train --special): control pieces, which text never produces.
  if (!special.empty()) options["control_symbols"] = fmt::format("{}", fmt::join(special, ","));
  // SentencePiece skips a line over its limit with a warning only, and fails on what is left with no reason.
  std::size_t too_long = 0, longest = 0;
  for (std::string_view line : lines) {
    too_long += line.size() > max_training_line_bytes;
    longest = std::max(longest, line.size());
  }
  const std::string skipped =
      too_long == 0 ? std::string()
                    : fmt::format(
                          "{} of the {} lines {} longer than SentencePiece's limit of {} bytes (the longest: {} "
                          "bytes) and {} skipped: break the text into shorter lines",
                          too_long, lines.size(), too_long == 1 ? "is" : "are", max_training_line_bytes, longest,
                          too_long == 1 ? "is" : "are");
  if (too_long == lines.size()) input_error("nothing to train a tokenizer on: {}", skipped);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(options, &iterator, &model);
  if (!status.ok()) {
    const std::string why = reason(status);
    input_error(
        "--vocab {}: SentencePiece cannot train it from these texts: {}{}{} (meshtrain keeps character_coverage at "
        "{}: change --vocab)",
        vocab, why.find_first_not_of(" (") == std::string::npos ? "it gives no reason" : why,
        skipped.empty() ? "" : "; ", skipped, character_coverage);
  }
  return model;
}

}  // namespace meshtrain::io
