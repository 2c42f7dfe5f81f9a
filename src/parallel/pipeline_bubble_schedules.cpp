// Pipeline schedules with smaller bubbles than 1F1B's, as data (parallel/pipeline_schedule.hpp): Megatron-LM's
// interleaved 1F1B over virtual stages, and ZB-H1's split backward (Qi et al., "Zero Bubble Pipeline
// Parallelism", 2024).
//
// Both lists put each receive right before the compute that reads it and each send right after the compute
// that wrote it. That is safe under eager sends (the simulator's SendSemantics::eager: an isend left in flight
// and waited later), and not under synchronous ones: interleaved 1F1B's steady state, like 1F1B's, has
// neighbours each sending before it receives (parallel/pipeline_schedule.cpp orders 1F1B's pairs against
// that; Megatron-LM fuses each send with the next receive into one batched isend/irecv).
#include "parallel/impl/schedule_lists.hpp"
#include "parallel/pipeline_schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace meshtrain {

using schedule_lists::ListBuilder;

// A stage's k-th forward (of micros · chunks) runs chunk (k / p) mod v of micro-batch (k / (p·v))·p + k mod p:
// groups of p micro-batches go through chunk 0, then the same group through chunk 1, and so on, before the next
// group; the k-th backward the same with the chunks in reverse. Warm-up: 2(p − s − 1) + (v − 1)·p forwards
// (all of them when micros = p), then one forward and one backward alternate, then the backwards left.
// Idle fraction (p − 1) / (v·m + p − 1): the bubble ÷ v. At v = 1 that is 1F1B's, with up to twice its
// warm-up and activations (Megatron-LM interleaves from v = 2).
std::vector<Action> interleaved_schedule(int stages, int stage, int micros, int chunks) {
  if (stages < 1 || stage < 0 || stage >= stages || chunks < 1 || micros < 1 || micros % stages != 0) {
    throw std::invalid_argument(fmt::format(
        "interleaved_schedule: need stages ≥ 1, 0 ≤ stage < stages, chunks ≥ 1 and micros a positive multiple of "
        "stages, got stages {}, stage {}, micros {}, chunks {}",
        stages, stage, micros, chunks));
  }
  const int p = stages, v = chunks, total = micros * chunks;
  const auto micro = [&](int k) { return k / (p * v) * p + k % p; };
  const auto forward_chunk = [&](int k) { return k / p % v; };
  const auto backward_chunk = [&](int k) { return v - 1 - k / p % v; };
  ListBuilder list(stages, stage, chunks);
  const auto forward = [&](int k) {
    list.recv_activation(micro(k), forward_chunk(k));
    list.forward(micro(k), forward_chunk(k));
    list.send_activation(micro(k), forward_chunk(k));
  };
  const auto backward = [&](int k) {
    list.recv_gradient(micro(k), backward_chunk(k));
    list.backward(micro(k), backward_chunk(k));
    list.send_gradient(micro(k), backward_chunk(k));
  };
  const int warmup = micros == stages ? total : std::min(2 * (p - stage - 1) + (v - 1) * p, total);
  for (int k = 0; k < warmup; ++k) forward(k);
  for (int k = 0; k < total - warmup; ++k) {
    forward(warmup + k);
    backward(k);
  }
  for (int k = total - warmup; k < total; ++k) backward(k);
  return list.take();
}

// 1F1B's order (warm-up p − s − 1 forwards, then one forward and one backward, then the backwards left),
// each backward its input gradient, sent on at once; stage s runs the weight gradients of micro-batch k − s
// after the input gradient of k. The later a stage, the sooner its input gradients are done and the longer
// it then waits for the cool-down to pass the stages before it: it fills that wait with the s weight
// gradients it deferred, stage 0 with none. A stage holds at most p micro-batches' activations (1F1B's
// stage 0). Idle time per stage (p − 1)(F + B − W) for W ≤ F and m ≥ p (1F1B's: (p − 1)(F + B + W)).
std::vector<Action> zero_bubble_h1_schedule(int stages, int stage, int micros) {
  if (stages < 1 || stage < 0 || stage >= stages || micros < 1) {
    throw std::invalid_argument(fmt::format(
        "zero_bubble_h1_schedule: need stages ≥ 1, 0 ≤ stage < stages and micros ≥ 1, got stages {}, stage {}, "
        "micros {}",
        stages, stage, micros));
  }
  ListBuilder list(stages, stage);
  const int warmup = std::min(stages - stage - 1, micros), deferred = stage;
  int weights = 0;  // weight gradients done: micro-batches 0 … weights − 1
  const auto forward = [&](int i) {
    list.recv_activation(i);
    list.forward(i);
    list.send_activation(i);
  };
  const auto backward = [&](int k) {
    list.recv_gradient(k);
    list.backward_input(k);
    list.send_gradient(k);
    if (k - deferred >= weights) list.backward_weight(weights++);
  };
  for (int i = 0; i < warmup; ++i) forward(i);
  for (int k = 0; k < micros - warmup; ++k) {
    forward(warmup + k);
    backward(k);
  }
  for (int k = micros - warmup; k < micros; ++k) backward(k);
  while (weights < micros) list.backward_weight(weights++);
  return list.take();
}

}  // namespace meshtrain
