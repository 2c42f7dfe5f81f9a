#include "core/injected_fault.hpp"

#include "core/errors.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>

namespace meshtrain {

namespace {

template <class Int>
bool parse_int(std::string_view text, Int& out) {
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end;
}

InjectedFault parse_one(std::string_view entry) {
  const auto bad = [&] {
    input_error("MESHTRAIN_INJECT_FAULT entry '{}' is invalid: write NAME@STEP or NAME@STEP:RANK (step >= 1)", entry);
  };
  const auto at = entry.find('@');
  if (at == std::string_view::npos) bad();
  InjectedFault fault;
  fault.name = std::string(entry.substr(0, at));
  const auto known = std::find(std::begin(injected_fault_names), std::end(injected_fault_names), fault.name);
  if (known == std::end(injected_fault_names)) {
    std::string names;
    for (auto n : injected_fault_names) names += (names.empty() ? "" : ", ") + std::string(n);
    input_error("MESHTRAIN_INJECT_FAULT names '{}', which is no fault: known faults are {}", fault.name, names);
  }
  auto rest = entry.substr(at + 1);
  const auto colon = rest.find(':');
  if (colon != std::string_view::npos) {
    if (!parse_int(rest.substr(colon + 1), fault.rank) || fault.rank < 0) bad();
    rest = rest.substr(0, colon);
  }
  if (!parse_int(rest, fault.step) || fault.step < 1) bad();
  return fault;
}

}  // namespace

std::vector<InjectedFault> parse_injected_faults(std::string_view text) {
  std::vector<InjectedFault> faults;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const auto entry = text.substr(0, comma);
    if (!entry.empty()) faults.push_back(parse_one(entry));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return faults;
}

const std::vector<InjectedFault>& injected_faults() {
  static const std::vector<InjectedFault> faults = [] {
    const char* text = std::getenv("MESHTRAIN_INJECT_FAULT");
    return text == nullptr ? std::vector<InjectedFault>() : parse_injected_faults(text);
  }();
  return faults;
}

bool fault_fires(std::string_view name, std::int64_t step, int world_rank) {
  return std::any_of(injected_faults().begin(), injected_faults().end(), [&](const InjectedFault& f) {
    return f.name == name && f.step == step && (f.rank < 0 || f.rank == world_rank);
  });
}

}  // namespace meshtrain
