#include "kernels/fused_attention_backward_choice.hpp"

#include <atomic>

namespace meshtrain {

namespace {
std::atomic<FusedAttentionBackward> choice{FusedAttentionBackward::deterministic};
}

void set_fused_attention_backward(FusedAttentionBackward c) { choice.store(c, std::memory_order_relaxed); }

FusedAttentionBackward fused_attention_backward_choice() { return choice.load(std::memory_order_relaxed); }

}  // namespace meshtrain
