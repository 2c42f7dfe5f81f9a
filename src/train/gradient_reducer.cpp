// Bucketed, overlapped data-parallel gradient reduction.
#include "train/gradient_reducer.hpp"

#include <algorithm>

namespace meshtrain {

GradientReducer::GradientReducer(Comm& dp, Vec<float> grads, std::size_t bucket_bytes)
    : dp_(dp), grads_(grads) {
  const std::size_t per_bucket = std::max<std::size_t>(1, bucket_bytes / sizeof(float));
  for (std::size_t end = grads.extent(0); end > 0;) {
    const std::size_t begin = end > per_bucket ? end - per_bucket : 0;
    buckets_.push_back({begin, end, Request(), false});
    end = begin;
  }
}

void GradientReducer::arm() { armed_ = true; }

void GradientReducer::start(Bucket& bucket) {
  // The gradients come from kernels on `space_`; they must be complete before MPI reads them.
  space_.fence();
  bucket.request = dp_.iallreduce_sum(grads_.data() + bucket.begin, bucket.end - bucket.begin);
  bucket.started = true;
}

void GradientReducer::ready_from(std::size_t offset) {
  if (!armed_ || dp_.size() == 1) return;
  for (auto& b : buckets_) {
    if (b.started) continue;
    if (b.begin < offset) break;  // buckets are ordered from the end: the rest are not ready either
    start(b);
  }
}

void GradientReducer::finish() {
  armed_ = false;
  if (dp_.size() == 1) return;
  for (auto& b : buckets_) {
    if (!b.started) start(b);
  }
  for (auto& b : buckets_) {
    b.request.wait();
    b.started = false;  // ready for the next step, armed or not
  }
}

}  // namespace meshtrain
