// Data-parallel gradient averaging in buckets that overlap the backward pass (PyTorch DDP's idea).
//
// The flat gradient buffer is cut into contiguous buckets of about `bucket_bytes`, from its end
// down, because backward finishes tensors in reverse layout order (ln_f first, the embeddings
// last). Gpt2::backward reports, as it goes, the offset from which every gradient is final; each
// bucket that lies entirely past that offset starts its non-blocking sum across the data-parallel
// group at once, while backward goes on with earlier layers. finish() starts what is left and
// waits for all. The per-rank gradients were scaled by 1/(global tokens), so the sum is the mean.
#pragma once

#include "core/exec.hpp"
#include "parallel/comm.hpp"

#include <cstddef>
#include <vector>

namespace meshtrain {

class GradientReducer {
 public:
  GradientReducer(Comm& dp, Vec<float> grads, std::size_t bucket_bytes);

  // Call at the start of the step's last backward pass: buckets may start from now on. Without
  // it (pipeline schedules interleave micro-batches) everything is reduced in finish().
  void arm();
  // Every gradient at flat offset ≥ `offset` is final (called by the backward pass).
  void ready_from(std::size_t offset);
  // Starts any bucket not yet started and waits for all of them.
  void finish();

  std::size_t buckets() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::size_t begin, end;
    Request request;
    bool started = false;
  };
  void start(Bucket& bucket);

  Comm& dp_;
  Vec<float> grads_;
  ExecSpace space_;
  std::vector<Bucket> buckets_;  // from the end of the buffer to its start
  bool armed_ = false;
};

}  // namespace meshtrain
