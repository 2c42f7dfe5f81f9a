// meshtrain sample --checkpoint FILE --prompt TEXT --tokens N [--temperature X] [--seed S] [--tokenizer PATH] [--ids]
//                  [--template NAME [--system TEXT]]
//
// Autoregressive generation from any checkpoint: the model shape comes from the config stored in
// the file. A checkpoint that records a tokenizer encodes the prompt and prints text with it
// (commands/sample_tokenizer.hpp, io/decoded_text.hpp); byte-level models (vocab 256) print text; others print token
// ids. Under a chat template the prompt is one user turn (commands/sample_prompt.hpp), the answer
// ends at the template's end-of-turn token, and only the answer is printed.
#include "commands/commands.hpp"

#include "checkpoint/checkpointer.hpp"
#include "checkpoint/contents.hpp"
#include "commands/lora_export.hpp"
#include "commands/sample_prompt.hpp"
#include "commands/sample_tokenizer.hpp"
#include "core/command_line.hpp"
#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "io/checkpoint/file.hpp"
#include "io/checkpoint/schema.hpp"
#include "io/decoded_text.hpp"
#include "model/language_model.hpp"

#include <Random123/philox.h>
#include <Random123/uniform.hpp>
#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <span>
#include <sstream>

namespace po = boost::program_options;

namespace meshtrain {
namespace {

struct SampleOptions {
  std::string checkpoint;
  std::string prompt = "\n";
  int tokens = 256;
  double temperature = 1.0;
  std::uint64_t seed = 42;
  std::string tokenizer;      // in place of the file the checkpoint records
  bool ids = false;           // print token ids, not text
  std::string chat_template;  // --template: the prompt as a user turn of this chat template
  std::optional<std::string> system;
};

SampleOptions parse_sample_options(const Args& args, bool& help) {
  SampleOptions o;
  po::options_description options("meshtrain sample");
  options.add_options()("checkpoint", po::value(&o.checkpoint), "checkpoint file (any layout)")(
      "prompt", po::value(&o.prompt), "text to continue")("tokens", po::value(&o.tokens)->default_value(o.tokens),
                                                          "tokens to generate")(
      "temperature", po::value(&o.temperature)->default_value(o.temperature), "softmax temperature (0: greedy)")(
      "seed", po::value(&o.seed)->default_value(o.seed), "sampling seed")(
      "tokenizer", po::value(&o.tokenizer),
      "the checkpoint's tokenizer at another path (its recorded hash must match)")(
      "ids", po::bool_switch(&o.ids), "print the token ids (the prompt's too) instead of text")(
      "template", po::value(&o.chat_template),
      "chatml, llama2, llama3, alpaca or plain: the prompt is one user turn of this chat template, rendered and "
      "encoded as prepare --sft renders a record's prompt; the answer ends at the template's end-of-turn token "
      "(<|im_end|>, </s>, <|eot_id|>, EOS) or after --tokens, and only the answer is printed, without that token "
      "(--ids: the prompt's ids, the answer's and the end-of-turn id when drawn). Needs a tokenizer")(
      "system", po::value<std::string>()->notifier([&o](const std::string& text) { o.system = text; }),
      "with --template: a system turn before the user's");
  constexpr const char* usage =
      "meshtrain sample --checkpoint FILE --prompt TEXT --tokens N [--temperature X] [--seed S] [--tokenizer PATH] "
      "[--ids] [--template NAME [--system TEXT]]";
  help = print_help_if_asked(args, options, usage);
  if (help) return o;
  parse_options(args, options, usage);
  if (o.system && o.chat_template.empty()) {
    input_error("--system is a chat template's system turn: give --template NAME with it");
  }
  if (o.checkpoint.empty()) input_error("--checkpoint is missing: give a checkpoint file");
  if (o.tokens < 0) input_error("--tokens = {} is invalid: it must be >= 0", o.tokens);
  if (!std::isfinite(o.temperature) || o.temperature < 0) {
    input_error("--temperature = {} is invalid: it must be a finite number >= 0", o.temperature);
  }
  if (o.prompt.empty()) input_error("--prompt is empty: give at least one character");
  return o;
}

// Draws a token from logits / temperature (argmax when temperature is 0) with uniform u in [0, 1).
int draw_token(const float* logits, int vocab, double temperature, double u) {
  int best = 0;
  for (int v = 1; v < vocab; ++v) {
    if (logits[v] > logits[best]) best = v;
  }
  if (temperature == 0) return best;
  double total = 0;
  for (int v = 0; v < vocab; ++v) total += std::exp((logits[v] - logits[best]) / temperature);
  double target = u * total;
  for (int v = 0; v < vocab; ++v) {
    target -= std::exp((logits[v] - logits[best]) / temperature);
    if (target < 0) return v;
  }
  return best;
}

double uniform_draw(std::uint64_t seed, std::uint64_t index) {
  r123::Philox4x32 generator;
  const r123::Philox4x32::ctr_type counter = {{std::uint32_t(index), std::uint32_t(index >> 32), 0x53414dU, 0}};
  const r123::Philox4x32::key_type key = {{std::uint32_t(seed), std::uint32_t(seed >> 32)}};
  return r123::u01<double>(generator(counter, key)[0]) * (1.0 - 1e-12);
}

// Prints each token as it comes: decoded by `text_with` (a tokenizer, or none), as a byte
// (`bytes`: byte-level models) or as its id.
class TokenPrinter {
 public:
  TokenPrinter(const io::Tokenizer* text_with, bool bytes) : bytes_(bytes) {
    if (text_with) {
      decoded_.emplace(*text_with, [](std::string_view text) { std::fwrite(text.data(), 1, text.size(), stdout); });
    }
  }
  void add(int token) {
    if (decoded_) {
      decoded_->add(token);
    } else if (bytes_) {
      std::fputc(token, stdout);
    } else {
      fmt::print("{} ", token);
    }
    std::fflush(stdout);
  }
  void finish() {
    if (decoded_) decoded_->finish();
    fmt::print("\n");
  }

 private:
  bool bytes_;
  std::optional<io::DecodedText> decoded_;
};

// What sampling needs of the checkpoint before anything is allocated: its stored config, the file's
// tensors checked against that config's model as loading checks them, and its tokenizer (or
// --tokenizer's file), checked against the recorded hash. A LoRA checkpoint (adapters, or an
// `import --adapter` file) is sampled as its merged model, W + s·B·A (its base checked as
// `export --merge-lora` checks it), whose logits are the adapter model's: `merged` then reads it.
struct CheckedCheckpoint {
  Config config;
  std::optional<io::Tokenizer> tokenizer;
  std::unique_ptr<MergedLoraModel> merged;
};

CheckedCheckpoint check_checkpoint(const io::CheckpointReader& reader, const SampleOptions& o) {
  if (stored_config_has_lora(reader)) {
    auto merged = std::make_unique<MergedLoraModel>(reader);
    Config config = merged->config();
    config.model.lora = LoraConfig{};  // the merged model is a plain one
    return {std::move(config),
            sampling_tokenizer(read_tokenizer_record(reader, o.checkpoint), o.tokenizer, o.checkpoint),
            std::move(merged)};
  }
  std::optional<Config> config = checked_stored_model(reader, /*with_optimizer=*/false);
  if (!config) {
    input_error(
        "'{}' is a weights file without a stored config (no meshtrain {} attribute): sample needs a meshtrain "
        "checkpoint, whose config gives the model's shape",
        o.checkpoint, io::schema::attr::format);
  }
  return {std::move(*config),
          sampling_tokenizer(read_tokenizer_record(reader, o.checkpoint), o.tokenizer, o.checkpoint), nullptr};
}

// The merged model's tensors into the model's flat weights (one rank, the whole model).
void load_merged(const MergedLoraModel& merged, LanguageModel<float>& model) {
  const ParameterLayout& layout = model.layout();
  Kokkos::View<float*, HostSpace> host("meshtrain::sample::merged", layout.total());
  for (const io::TensorSource& source : merged.merged_tensors()) {
    const TensorInfo& t = layout.find(source.name);
    // The tensor's own elements lead its array (vocabulary padding rows follow, left zero).
    source.fill(std::span<float>(host.data() + t.offset, t.piece.elements()));
  }
  Kokkos::deep_copy(model.weights(), Kokkos::View<const float*, HostSpace>(host.data(), layout.total()));
}

}  // namespace

int sample_command(const Args& args, MPI_Comm comm) {
  bool help = false;
  const SampleOptions o = parse_sample_options(args, help);
  if (help) return 0;
  // An unknown template is refused before the checkpoint is read.
  std::optional<ChatPrompt> chat;
  if (!o.chat_template.empty()) chat = ChatPrompt{io::parse_chat_template(o.chat_template), o.system};
  const io::CheckpointReader reader(o.checkpoint, comm);
  const CheckedCheckpoint checked = check_checkpoint(reader, o);
  const Config& cfg = checked.config;
  const std::optional<io::Tokenizer>& tokenizer = checked.tokenizer;
  if (chat && !tokenizer) {
    input_error(
        "--template {}: checkpoint '{}' records no tokenizer (a byte-level model), and a chat template's special "
        "tokens need one; sample it without --template",
        o.chat_template, o.checkpoint);
  }
  const int T = cfg.model.seq_len, V = cfg.model.vocab;
  // Ids a tokenizer does not know (the model's vocabulary may be padded beyond it) are never drawn.
  const int drawable = tokenizer ? std::min(V, tokenizer->vocab_size()) : V;
  const SamplePrompt prompt = sample_prompt(o.prompt, chat, tokenizer, V);
  std::vector<int> context = prompt.ids;

  ExecSpace space;
  const auto model = make_language_model<float>(space, cfg.model, 1);
  if (checked.merged) {
    load_merged(*checked.merged, *model);
  } else {
    Checkpointer(cfg, model->layout(), comm).load_weights(o.checkpoint, model->weights());
  }
  Buffer<int> inputs("meshtrain::sample::inputs", T);
  auto host_inputs = Kokkos::create_mirror_view(inputs);
  Kokkos::View<float*, HostSpace> logits_row("meshtrain::sample::logits", V);
  // A row of logits is the padded vocabulary wide (train.vocab_multiple).
  const std::size_t width = std::size_t(model->layout().padded_vocab());

  const int rank = mpi::rank_of(comm);
  TokenPrinter printer(o.ids || !tokenizer ? nullptr : &*tokenizer, !o.ids && V == 256);
  // Under a template the text printed is the answer alone; ids are printed from the prompt's on.
  if (rank == 0 && (o.ids || !chat)) {
    for (int t : context) printer.add(t);
  }
  for (int i = 0; i < o.tokens; ++i) {
    // The model sees the last T tokens; positions after the context are padding that causal
    // attention keeps from influencing the logits read at the last real position.
    const int n = std::min<int>(T, context.size());
    Kokkos::deep_copy(host_inputs, 0);
    for (int t = 0; t < n; ++t) host_inputs(t) = context[context.size() - n + t];
    Kokkos::deep_copy(inputs, host_inputs);
    const CVec<float> logits = model->forward_logits(CVec<int>(inputs.data(), T));
    const std::size_t first = std::size_t(n - 1) * width;  // row n − 1's V tokens, not its padding
    Kokkos::deep_copy(logits_row, Kokkos::subview(logits, std::make_pair(first, first + std::size_t(V))));
    const int next = draw_token(logits_row.data(), drawable, o.temperature, uniform_draw(o.seed, i));
    context.push_back(next);
    if (next == prompt.stop) {
      if (rank == 0 && o.ids) printer.add(next);
      break;
    }
    if (rank == 0) printer.add(next);
  }
  if (rank == 0) printer.finish();
  return 0;
}

}  // namespace meshtrain
