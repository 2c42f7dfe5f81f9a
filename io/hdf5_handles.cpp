// Error reporting for MESHTRAIN_H5_CHECK: reads HDF5's error stack into our own message.
#include "io/hdf5_handles.hpp"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace meshtrain::io::h5 {
namespace {

struct StackEntry {
  std::string function;
  std::string description;
  std::string minor;
};

herr_t collect(unsigned /*n*/, const H5E_error2_t* entry, void* data) {
  auto* entries = static_cast<std::vector<StackEntry>*>(data);
  StackEntry e;
  if (entry->func_name != nullptr) e.function = entry->func_name;
  if (entry->desc != nullptr) e.description = entry->desc;
  char minor[256] = {0};
  H5E_type_t type{};
  if (H5Eget_msg(entry->min_num, &type, minor, sizeof minor) > 0) e.minor = minor;
  entries->push_back(std::move(e));
  return 0;
}

std::vector<StackEntry> error_stack() {
  std::vector<StackEntry> entries;
  // Downward: from the API call the caller made to the deepest cause.
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &entries);
  return entries;
}

}  // namespace

std::string last_error_message() {
  const auto entries = error_stack();
  if (entries.empty()) return {};
  const StackEntry& deepest = entries.back();
  std::string message = deepest.description;
  if (!deepest.minor.empty() && deepest.minor != deepest.description) message += fmt::format(" ({})", deepest.minor);
  if (entries.size() > 1 && !entries.front().description.empty()) {
    message = fmt::format("{}: {}", entries.front().description, message);
  }
  return message;
}

void fail(const char* file, int line, const char* call, const char* hint) {
  std::string reason = last_error_message();
  if (reason.empty()) reason = "no detail on HDF5's error stack";
  throw Error(fmt::format("{}:{}: HDF5 call {} failed: {}\nHINT: {}", file, line, call, reason, hint));
}

void quiet_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

}  // namespace meshtrain::io::h5
