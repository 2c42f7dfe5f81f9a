// Things built once per key and kept, where a build may fail for a key that will never build (cuDNN's
// attention graphs: a shape or GPU its engines lack). The failure is kept with the key, so no call
// builds twice, and the caller goes another way (the Kokkos kernel); the first failure of the process
// is reported through the caller's `warn`, the later ones silently, so a run warns once and not every step.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

namespace meshtrain {

template <class Key, class Value>
class BuildOnceCache {
 public:
  // The value of `key`: built by build() on its first request and kept; nullptr where that build threw
  // a std::runtime_error (its what() goes to warn() if no build of this cache failed before). Other
  // exceptions pass through and leave nothing kept. Not thread-safe: the caller holds its lock.
  const Value* get(const Key& key, const std::function<Value()>& build,
                   const std::function<void(const std::string& why)>& warn) {
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      std::optional<Value> built;
      try {
        built.emplace(build());
      } catch (const std::runtime_error& e) {
        if (!warned_) warn(e.what());
        warned_ = true;
      }
      it = entries_.emplace(key, std::move(built)).first;
    }
    return it->second ? &*it->second : nullptr;
  }

  // Keys whose build failed.
  std::size_t failures() const {
    std::size_t n = 0;
    for (const auto& [key, value] : entries_) n += value ? 0 : 1;
    return n;
  }

 private:
  std::map<Key, std::optional<Value>> entries_;
  bool warned_ = false;
};

}  // namespace meshtrain
