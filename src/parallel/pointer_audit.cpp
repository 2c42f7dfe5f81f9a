// The pointer audit's decorator.
#include "parallel/pointer_audit.hpp"

#include "core/errors.hpp"
#include "parallel/comm_decorator.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace meshtrain {
namespace {

class PointerAudit final : public CommDecorator {
 public:
  PointerAudit(std::unique_ptr<Comm> inner, std::string group, LiveMemoryTest inside)
      : CommDecorator(std::move(inner)), group_(std::move(group)), inside_(std::move(inside)) {}

 private:
  void around(const CallShape& shape, CallRef<void> call) override {
    check(shape);
    call();
  }
  Request started(const CallShape& shape, CallRef<Request> call) override {
    check(shape);
    return call();
  }

  void check(const CallShape& shape) const {
    check(shape, shape.read, "reads");
    check(shape, shape.written, "writes");
  }
  void check(const CallShape& shape, const CallBuffer& b, const char* role) const {
    if (b.bytes == 0 || inside_(b.data, b.bytes)) return;
    throw std::logic_error(fmt::format(
        "pointer audit: {} on group {} {} {} bytes at {}, which is not inside a live allocation of the execution "
        "space's memory (a device backend cannot read a host buffer; put it in a Kokkos View)",
        collective_name(shape.kind), group_, role, b.bytes, b.data));
  }

  std::string group_;
  LiveMemoryTest inside_;
};

}  // namespace

bool pointer_audit_requested() {
  static const bool requested = [] {
    const char* value = std::getenv("MESHTRAIN_POINTER_AUDIT");
    const std::string_view text = value == nullptr ? "0" : value;
    if (text != "0" && text != "1")
      input_error("MESHTRAIN_POINTER_AUDIT={}: use 1 (audit the groups' buffers) or 0", text);
    return text == "1";
  }();
  return requested;
}

std::unique_ptr<Comm> make_pointer_audit(std::unique_ptr<Comm> inner, std::string group, LiveMemoryTest inside) {
  return std::make_unique<PointerAudit>(std::move(inner), std::move(group), std::move(inside));
}

}  // namespace meshtrain
