// Activation recomputation on one rank: selective and full give bitwise the losses, stage outputs,
// input gradients and parameter gradients of none, for whole models and for first, middle and last
// pipeline stages with several micro-batches in flight, for both families; and they allocate what
// the formulas below, written out independently of the carving code, say.
#include "recompute_harness.hpp"

#include "core/errors.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain {
namespace test_recompute {

using Case = test::StageCase;

std::string describe(const Case& c) {
  const ModelConfig& m = c.model;
  return fmt::format("L{} H{} C{} V{} T{} B{} stage {}/{} slots {}", m.layers, m.heads, m.d_model, m.vocab, m.seq_len,
                     c.batch, c.place.stage, c.place.stages, c.slots);
}

const Case cases[] = {
    {{3, 2, 8, 11, 5}, 2, {0, 1}, 1},  // the whole model, one micro-batch
    {{3, 2, 8, 11, 5}, 2, {0, 1}, 2},  // … two in flight
    {{2, 3, 12, 7, 4}, 3, {0, 1}, 3},  // head size 4, odd vocabulary
    {{1, 1, 6, 5, 16}, 1, {0, 1}, 2},  // one block, one head, longer context
    {{5, 2, 8, 13, 6}, 2, {0, 3}, 2},  // first stage (blocks 0, 1)
    {{5, 2, 8, 13, 6}, 2, {1, 3}, 3},  // middle stage (blocks 1..3 of 5: 2 blocks)
    {{5, 2, 8, 13, 6}, 2, {2, 3}, 2},  // last stage
    {{4, 4, 16, 9, 7}, 1, {1, 4}, 2},  // a middle stage of one block
};

// Under each model.attention; fused attention keeps no probabilities, so selective has nothing to
// drop there and allocates what none does.
template <class Real>
void expect_modes_agree(const Case& c) {
  SCOPED_TRACE(describe(c));
  for (AttentionKernel attention : {AttentionKernel::fused, AttentionKernel::materialized}) {
    SCOPED_TRACE(std::string(name_of(attention)));
    ModelConfig m = c.model;
    m.attention = attention;
    const auto none = test::run_pipeline_like<Real>(m, c.batch, c.place, c.slots, Recompute::none);
    std::size_t nonzero = 0;
    for (Real g : none.grads) nonzero += g != Real(0);
    ASSERT_GT(nonzero, none.grads.size() / 2) << "the gradients are mostly zero: the comparison would prove nothing";
    for (Recompute mode : {Recompute::selective, Recompute::full}) {
      const std::string name = mode == Recompute::selective ? "selective" : "full";
      const auto other = test::run_pipeline_like<Real>(m, c.batch, c.place, c.slots, mode);
      test::expect_same_run(none, other, c.place, name);
      if (mode == Recompute::selective && attention == AttentionKernel::fused) {
        EXPECT_EQ(other.sizes.total(), none.sizes.total()) << "selective under fused attention allocates as none";
      } else {
        EXPECT_LT(other.sizes.total(), none.sizes.total()) << name << " must allocate less than none";
      }
    }
  }
}

const Case llama_cases[] = {
    {test::llama_of({3, 4, 16, 11, 5}, 2, 20), 2, {0, 1}, 2},  // grouped-query, the whole model, two in flight
    {test::llama_of({1, 2, 8, 7, 6}, 1, 12), 1, {0, 1}, 2},    // multi-query, one block, two in flight
    {test::llama_of({5, 2, 8, 13, 6}, 1, 12), 2, {0, 3}, 2},   // first stage
    {test::llama_of({5, 2, 8, 13, 6}, 2, 12), 2, {1, 3}, 3},   // middle stage, multi-head
    {test::llama_of({5, 2, 8, 13, 6}, 1, 12), 2, {2, 3}, 2},   // last stage
};

TEST(Recompute, LlamaIdenticalToNone) {
  for (const Case& c : llama_cases) {
    expect_modes_agree<float>(c);
    expect_modes_agree<double>(c);
  }
}

TEST(Recompute, FloatIdenticalToNone) {
  for (const Case& c : cases) expect_modes_agree<float>(c);
}

TEST(Recompute, DoubleIdenticalToNone) {
  for (const Case& c : cases) expect_modes_agree<double>(c);
}

TEST(Recompute, ParsesTheConfigValues) {
  EXPECT_EQ(parse_name<Recompute>("none"), Recompute::none);
  EXPECT_EQ(parse_name<Recompute>("selective"), Recompute::selective);
  EXPECT_EQ(parse_name<Recompute>("full"), Recompute::full);
  try {
    parse_name<Recompute>("Full");
    FAIL() << "an unknown mode must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("train.recompute"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("selective"), std::string::npos) << e.what();
  }
}

// Attention's share of a block (float elements), by model.attention. materialized: the probabilities
// P [B, NH, T, T] kept, and datt of their size in the scratch. fused: one log-sum-exp per row
// [B, NH, T] kept, and in the scratch the host kernel's workspace (kernels/flash_attention_host.hpp,
// float: the scores and their gradients of a block of 64 query rows, 2·64·T, its O or dQ, 64·hs, and
// row sums, 64).
struct AttentionTerms {
  std::size_t probabilities, lse, scratch;
};
AttentionTerms attention_terms(const ModelConfig& m, std::size_t B, std::size_t NH, std::size_t hs) {
  const std::size_t T = m.seq_len;
  if (m.attention == AttentionKernel::fused) return {0, B * NH * T, 2 * 64 * T + 64 * hs + 64};
  return {B * NH * T * T, 0, B * NH * T * T};
}

// The element counts, written out per tensor from gpt2.hpp's shape comments.
ActivationSizes expected_sizes(const ModelConfig& m, int batch, int tp, StagePlace place, int slots, Recompute r) {
  const std::size_t B = batch, T = m.seq_len, C = m.d_model, N = B * T, Cl = C / tp, NH = m.heads / tp;
  const std::size_t Vl = (std::size_t(m.vocab) + tp - 1) / tp;  // padded vocabulary rows per rank
  const std::size_t L = (place.stage + 1) * m.layers / place.stages - place.stage * m.layers / place.stages;
  const AttentionTerms a = attention_terms(m, B, NH, C / m.heads);
  const std::size_t att = a.probabilities;
  // ln1, residual2, ln2, residual3 (N·C); four means/rstds (N); qkv, atty, fch, fch_gelu (N·Cl: 3+1+4+4).
  const std::size_t block = 4 * N * C + 4 * N + 12 * N * Cl + att + a.lse;
  // ln_f output, mean and rstd, logits, losses, row maxima, partials: the last stage only.
  const std::size_t head = place.last() ? N * C + 2 * N + N * Vl + N + N + 2 * N : 0;
  const std::size_t slot_rest = N * C + N * C + head;  // encoded, proj, head
  // dresidual, dln, datty, dqkv, dfch, datt; the column sums' partials (one per 128 rows and column
  // of the widest sum: the c_fc bias, or LayerNorm's two with the c_proj bias its backward adds,
  // unless the rows are one chunk; dwpe sums B rows of T·C) and the token order (two N-position
  // arrays, 256 digit counts per 256 positions).
  const std::size_t chunks = (N + 127) / 128, batch_chunks = (B + 127) / 128;
  const std::size_t partials =
      std::max(chunks > 1 ? chunks * std::max(4 * Cl, 3 * C) : 0, batch_chunks > 1 ? batch_chunks * T * C : 0);
  const std::size_t backward = 2 * N * C + 8 * N * Cl + a.scratch + partials + 2 * N + 256 * ((N + 255) / 256);
  switch (r) {
    case Recompute::none: return {slots * (L * block + slot_rest), backward};
    case Recompute::selective:  // each block drops att; one att shared (fused: none to drop)
      return {slots * (L * (block - att) + slot_rest), backward + att};
    case Recompute::full:  // each block keeps its output (the next one's input); one block set shared
      return {slots * (L * N * C + slot_rest), backward + block - N * C};
  }
  return {};
}

// The element counts of a llama, written out per field from llama.hpp's shape comments.
ActivationSizes expected_llama_sizes(const ModelConfig& m, int batch, int tp, StagePlace place, int slots,
                                     Recompute r) {
  const std::size_t B = batch, T = m.seq_len, C = m.d_model, N = B * T, hs = C / m.heads;
  const std::size_t NH = m.heads / tp, KV = m.kv_heads / tp, H = m.ffn_hidden / tp;
  const std::size_t Vl = (std::size_t(m.vocab) + tp - 1) / tp;
  const std::size_t L = (place.stage + 1) * m.layers / place.stages - place.stage * m.layers / place.stages;
  const AttentionTerms a = attention_terms(m, B, NH, hs);
  const std::size_t att = a.probabilities, qkv = N * (NH + 2 * KV) * hs, atty = N * NH * hs;
  // ln1, residual2, ln2, residual3 (N·C); two rstds (N); qkv, atty; gate|up (2H) and swiglu (H).
  const std::size_t block = 4 * N * C + 2 * N + qkv + atty + 3 * N * H + att + a.lse;
  // norm output and rstd, logits, losses, row maxima, partials: the last stage only.
  const std::size_t head = place.last() ? N * C + N + N * Vl + N + N + 2 * N : 0;
  const std::size_t slot_rest = N * C + N * C + head;  // encoded, proj, head
  // dresidual, dln (N·C); datty, dqkv, datt; dswiglu and dgate_up (3·H); the RMSNorm weight
  // gradients' partials (C per 128 rows, none for one chunk); the token order (as gpt2's).
  const std::size_t chunks = (N + 127) / 128;
  const std::size_t backward =
      2 * N * C + atty + qkv + a.scratch + 3 * N * H + (chunks > 1 ? chunks * C : 0) + 2 * N + 256 * ((N + 255) / 256);
  switch (r) {
    case Recompute::none: return {slots * (L * block + slot_rest), backward};
    case Recompute::selective: return {slots * (L * (block - att) + slot_rest), backward + att};
    case Recompute::full: return {slots * (L * N * C + slot_rest), backward + block - N * C};
  }
  return {};
}

struct Sizing {
  ModelConfig model;
  int batch, tp;
  StagePlace place;
  int slots;
};
using SizeFunction = ActivationSizes (*)(const ModelConfig&, int, int, StagePlace, int, Recompute);

// The sizings at ep 1 (their last argument's default).
ActivationSizes gpt2_sizes(const ModelConfig& m, int batch, int tp, StagePlace place, int slots, Recompute r) {
  return decoder_activation_elements<float, Gpt2Family>(m, batch, tp, place, slots, r);
}
ActivationSizes llama_sizes(const ModelConfig& m, int batch, int tp, StagePlace place, int slots, Recompute r) {
  return decoder_activation_elements<float, LlamaFamily>(m, batch, tp, place, slots, r);
}
ActivationSizes family_sizes(const ModelConfig& m, int batch, int tp, StagePlace place, int slots, Recompute r) {
  return activation_elements<float>(m, batch, tp, place, slots, r);
}

// Every model.attention with every train.recompute.
std::vector<std::pair<AttentionKernel, Recompute>> attention_and_recompute_modes() {
  std::vector<std::pair<AttentionKernel, Recompute>> modes;
  for (AttentionKernel a : {AttentionKernel::fused, AttentionKernel::materialized})
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) modes.emplace_back(a, r);
  return modes;
}

// What `sizing` says for each case and mode against what `formula` says.
void expect_sizes_follow(std::span<const Sizing> sizings, SizeFunction sizing, SizeFunction formula) {
  for (Sizing s : sizings) {
    for (auto [attention, r] : attention_and_recompute_modes()) {
      SCOPED_TRACE(std::string(name_of(attention)));
      s.model.attention = attention;
      const ActivationSizes want = formula(s.model, s.batch, s.tp, s.place, s.slots, r);
      const ActivationSizes got = sizing(s.model, s.batch, s.tp, s.place, s.slots, r);
      EXPECT_EQ(got.kept, want.kept) << "L" << s.model.layers << " tp " << s.tp << " stage " << s.place.stage
                                     << " mode " << int(r);
      EXPECT_EQ(got.scratch, want.scratch)
          << "L" << s.model.layers << " tp " << s.tp << " stage " << s.place.stage << " mode " << int(r);
    }
  }
}

// What the model of m (either family) allocates against `sizing`, for whole models and two stages.
void expect_model_allocates(ModelConfig m, SizeFunction sizing) {
  ExecSpace space;
  for (StagePlace place : {StagePlace{0, 1}, StagePlace{0, 2}, StagePlace{1, 2}}) {
    for (auto [attention, r] : attention_and_recompute_modes()) {
      SCOPED_TRACE(std::string(name_of(attention)));
      m.attention = attention;
      const auto model = make_language_model<float>(space, m, 3, nullptr, place, 2, r);
      const ActivationSizes want = sizing(m, 3, 1, place, 2, r);
      EXPECT_EQ(model->activation_elements().kept, want.kept);
      EXPECT_EQ(model->activation_elements().scratch, want.scratch);
    }
  }
}

TEST(Recompute, LlamaActivationElementsFollowTheFormulas) {
  const Sizing sizings[] = {
      {test::llama_of({3, 4, 16, 11, 5}, 2, 20), 2, 1, {0, 1}, 1},
      {test::llama_of({3, 4, 16, 11, 5}, 2, 20), 2, 2, {0, 1}, 2},
      {test::llama_of({5, 8, 32, 13, 6}, 4, 24), 3, 4, {1, 3}, 3},
      {test::llama_of({5, 8, 32, 13, 6}, 4, 24), 1, 2, {2, 3}, 2},
      {test::llama_of({32, 32, 4096, 32000, 2048}, 8, 11008), 1, 8, {0, 4}, 4},  // LLaMA-7B's shape with GQA
  };
  expect_sizes_follow(sizings, &llama_sizes, &expected_llama_sizes);
  // The family dispatch of the planner (and so of the trainer's fit check, plan/fit.hpp).
  expect_sizes_follow(sizings, &family_sizes, &expected_llama_sizes);
}

TEST(Recompute, LlamaAllocatesWhatTheSizingSays) {
  expect_model_allocates(test::llama_of({5, 2, 8, 13, 6}, 1, 12), &expected_llama_sizes);
}

TEST(Recompute, ActivationElementsFollowTheFormulas) {
  const Sizing sizings[] = {
      {{3, 2, 8, 11, 5}, 2, 1, {0, 1}, 1},           {{12, 12, 768, 50257, 1024}, 4, 1, {0, 1}, 1},
      {{12, 12, 768, 50257, 1024}, 4, 4, {1, 4}, 4}, {{5, 2, 8, 13, 6}, 2, 2, {2, 3}, 3},
      {{5, 4, 16, 13, 6}, 3, 4, {0, 2}, 2},
  };
  expect_sizes_follow(sizings, &gpt2_sizes, &expected_sizes);
  // GPT-2 small, micro-batch 4, T 1024, one rank: per block the probabilities are 4·12·1024² = 50.3M
  // elements of the 79.2M a block keeps; full keeps 3.1M per block.
  ModelConfig small{12, 12, 768, 50257, 1024};
  small.attention = AttentionKernel::materialized;
  const auto none = gpt2_sizes(small, 4, 1, {}, 1, Recompute::none);
  const auto selective = gpt2_sizes(small, 4, 1, {}, 1, Recompute::selective);
  const auto full = gpt2_sizes(small, 4, 1, {}, 1, Recompute::full);
  EXPECT_EQ(none.kept - selective.kept, 12u * 4 * 12 * 1024 * 1024);
  EXPECT_EQ(selective.scratch - none.scratch, 4u * 12 * 1024 * 1024);
  EXPECT_LT(full.total(), selective.total());
  // Fused attention keeps 4·12·1024 log-sum-exps a block instead, and selective drops nothing more.
  small.attention = AttentionKernel::fused;
  const auto fused = gpt2_sizes(small, 4, 1, {}, 1, Recompute::none);
  EXPECT_EQ(none.kept - fused.kept, 12u * (4 * 12 * 1024 * 1024 - 4 * 12 * 1024));
  EXPECT_EQ(gpt2_sizes(small, 4, 1, {}, 1, Recompute::selective).total(), fused.total());
}

TEST(Recompute, ModelAllocatesWhatTheSizingSays) { expect_model_allocates(ModelConfig{5, 2, 8, 13, 6}, &gpt2_sizes); }

}  // namespace test_recompute
}  // namespace meshtrain
