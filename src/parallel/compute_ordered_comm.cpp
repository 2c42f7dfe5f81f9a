// The compute-ordered decorator (parallel/compute_ordered_comm.hpp).
#include "parallel/compute_ordered_comm.hpp"

#include "parallel/comm_decorator.hpp"

#include <utility>

namespace meshtrain {
namespace {

class ComputeOrderedComm final : public CommDecorator {
 public:
  ComputeOrderedComm(std::unique_ptr<Comm> inner, WaitForCompute wait_for_compute)
      : CommDecorator(std::move(inner)), wait_for_compute_(std::move(wait_for_compute)) {}

 private:
  void around(const CallShape& shape, CallRef<void> call) override {
    order_after_compute(shape);
    call();
  }
  Request started(const CallShape& shape, CallRef<Request> call) override {
    order_after_compute(shape);
    return call();
  }

  // A receive's buffer too: compute issued before it may still read what it overwrites. The barrier
  // has no buffer.
  void order_after_compute(const CallShape& shape) {
    const auto touches = [](const CallBuffer& b) { return b.bytes > 0; };
    if (touches(shape.read) || touches(shape.written)) wait_for_compute_();
  }

  WaitForCompute wait_for_compute_;
};

}  // namespace

std::unique_ptr<Comm> make_compute_ordered_comm(std::unique_ptr<Comm> inner, WaitForCompute wait_for_compute) {
  return std::make_unique<ComputeOrderedComm>(std::move(inner), std::move(wait_for_compute));
}

}  // namespace meshtrain
