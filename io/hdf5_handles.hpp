// RAII owners for HDF5 identifiers and the checked-call macro every HDF5 call in io/ goes through.
//
// MESHTRAIN_H5_CHECK(call, hint) evaluates an HDF5 call, and if it returns a negative value
// (herr_t, hid_t, htri_t, hssize_t all signal failure that way) throws h5::Error with the source
// file and line, the call's text, the innermost message of HDF5's error stack and a `HINT:` for
// the fix, in the manner of llm.c's mpiCheck/ncclCheck:
//
//   h5::Dataset dset{MESHTRAIN_H5_CHECK(H5Dopen2(file.get(), name, H5P_DEFAULT),
//                                       "does the dataset exist? (h5ls -r FILE)")};
//
// HDF5 prints its own error stack to stderr by default; quiet_errors() turns that off, since every
// failure is reported through our own messages instead.
#pragma once

#include <hdf5.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace meshtrain::io::h5 {

// A failed HDF5 call. Callers that read user-supplied files translate it into InputError
// naming the file; elsewhere it is an internal failure.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws Error("<file>:<line>: HDF5 call <call> failed: <HDF5's reason>\nHINT: <hint>").
[[noreturn]] void fail(const char* file, int line, const char* call, const char* hint);

// The innermost description on HDF5's current error stack ("" if it is empty).
std::string last_error_message();

// Turns off HDF5's automatic printing of its error stack for this thread (idempotent).
void quiet_errors();

template <class Result>
Result check(Result result, const char* file, int line, const char* call, const char* hint) {
  if (result < 0) fail(file, line, call, hint);
  return result;
}

#define MESHTRAIN_H5_CHECK(call, hint) ::meshtrain::io::h5::check((call), __FILE__, __LINE__, #call, (hint))

// Owns one identifier and closes it with Close; move-only. Close errors in the destructor are
// ignored (there is no one to report them to); call close() where they matter.
template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  explicit operator bool() const { return valid(); }

  // Closes now, reporting a failure (for example a file whose final flush fails).
  void close(const char* hint) {
    if (id_ < 0) return;
    const hid_t id = std::exchange(id_, H5I_INVALID_HID);
    check(Close(id), __FILE__, __LINE__, "H5*close(handle)", hint);
  }
  // Gives up ownership: the caller closes the identifier (and handles the failure its own way).
  [[nodiscard]] hid_t release() noexcept { return std::exchange(id_, H5I_INVALID_HID); }
  void reset() noexcept {
    if (id_ >= 0) Close(std::exchange(id_, H5I_INVALID_HID));
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

using File = Handle<H5Fclose>;
using Group = Handle<H5Gclose>;
using Dataset = Handle<H5Dclose>;
using Dataspace = Handle<H5Sclose>;
using PropList = Handle<H5Pclose>;
using Attribute = Handle<H5Aclose>;
using Datatype = Handle<H5Tclose>;
using Object = Handle<H5Oclose>;

}  // namespace meshtrain::io::h5
