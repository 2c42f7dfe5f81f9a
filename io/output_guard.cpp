// Outputs that would destroy an input or a checkpoint, refused (io/output_guard.hpp).
#include "io/output_guard.hpp"

#include "core/errors.hpp"
#include "io/hdf5_handles.hpp"

#include <hdf5.h>

#include <filesystem>

namespace meshtrain::io {
namespace {

namespace fs = std::filesystem;

// Why `path`, written on the way to `out`, would destroy something (empty if it would not).
std::string overwrite_problem(const std::string& path, const std::vector<std::string>& inputs) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) return {};
  for (const std::string& input : inputs) {
    if (fs::equivalent(path, input, ec)) {
      return fmt::format("'{}' is the input '{}' (the same file), which writing would replace", path, input);
    }
  }
  if (fs::is_directory(status)) return fmt::format("'{}' is a directory", path);
  if (!fs::is_regular_file(status)) return fmt::format("'{}' exists and is not a regular file", path);
  h5::quiet_errors();
  if (H5Fis_hdf5(path.c_str()) > 0) return fmt::format("'{}' is an HDF5 file, perhaps a checkpoint", path);
  return {};
}

}  // namespace

void require_safe_output(const std::string& option, const std::string& out, const std::vector<std::string>& inputs,
                         const std::vector<std::string>& temporaries) {
  std::vector<std::string> written = {out};
  written.insert(written.end(), temporaries.begin(), temporaries.end());
  for (const std::string& path : written) {
    const std::string problem = overwrite_problem(path, inputs);
    if (!problem.empty()) {
      input_error("{} '{}': {}; refusing to write over it, nothing was written (name a new file)", option, out,
                  problem);
    }
  }
  const fs::path parent = fs::absolute(out).parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    input_error("{} '{}': directory '{}' does not exist", option, out, parent.string());
}

}  // namespace meshtrain::io
