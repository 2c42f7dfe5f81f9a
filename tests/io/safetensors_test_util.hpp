// Runs the independent safetensors writer and reader (tests/io/safetensors_reference.py).
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <string>

#ifndef MESHTRAIN_PYTHON
#error "MESHTRAIN_PYTHON must name a python3 with numpy and torch"
#endif

namespace meshtrain::io::test {

// `safetensors_reference.py <mode> <dir>`'s exit status; its output goes to the test's.
inline int run_reference(const std::string& mode, const std::string& dir) {
  const std::string command = std::string(MESHTRAIN_PYTHON) + " " + MESHTRAIN_SOURCE_DIR +
                              "/tests/io/safetensors_reference.py " + mode + " '" + dir + "'";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace meshtrain::io::test
