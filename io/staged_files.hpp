// Several files that appear together or not at all: each is written whole under a temporary name
// in its final directory and fsynced; commit() renames them all, then fsyncs the directories. A
// failure before commit() (or the object's destruction without it) removes every temporary; a
// failed rename also removes the files already renamed, so no mix of new files is left.
// (io/atomic_file.hpp does the same for one file.)
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::io {

// The temporary a StagedFiles writes on its way to `path`.
std::string staged_temporary_path(const std::string& path);

class StagedFiles {
 public:
  using Append = std::function<void(std::string_view)>;

  // `what` names the kind of file in messages ("safetensors file").
  explicit StagedFiles(std::string what) : what_(std::move(what)) {}
  ~StagedFiles();  // removes the temporaries unless committed
  StagedFiles(const StagedFiles&) = delete;
  StagedFiles& operator=(const StagedFiles&) = delete;

  // Writes staged_temporary_path(path): `produce` is called once with a function that appends bytes.
  // InputError naming the file, the step and the system's reason when the system refuses
  // (everything staged so far removed); whatever `produce` throws likewise removes everything.
  void write(const std::string& path, const std::function<void(const Append&)>& produce);

  // Renames every temporary over its final name; InputError (and nothing left) when one fails.
  void commit();

 private:
  [[noreturn]] void fail(const std::string& path, const char* step, int err);
  void remove_all();

  std::string what_;
  std::vector<std::string> paths_;  // written, in order
  std::size_t renamed_ = 0;         // how many of paths_ commit() has renamed
  bool committed_ = false;
};

}  // namespace meshtrain::io
