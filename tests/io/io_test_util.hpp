// Helpers shared by the io tests: scratch directories (per rank, or one shared by all ranks),
// raw file bytes, and checking that a call throws InputError with a message naming what it must.
#pragma once

#include "core/errors.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

namespace meshtrain::io::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

inline std::string make_temp_dir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "meshtrain_io_XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

// A scratch directory of this rank alone, removed at the end of the test.
class LocalDir {
 public:
  LocalDir() : path_(make_temp_dir()) {}
  ~LocalDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  LocalDir(const LocalDir&) = delete;
  LocalDir& operator=(const LocalDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// One scratch directory for all ranks (collective constructor and destructor).
class SharedDir {
 public:
  SharedDir() {
    std::string path = world_rank() == 0 ? make_temp_dir() : std::string();
    unsigned long long n = path.size();
    MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    path.resize(n);
    MPI_Bcast(path.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = path;
  }
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs f; passes if it throws InputError whose message contains every one of `needles`.
// Returns the message ("" if nothing or something else was thrown).
inline std::string expect_input_error(const std::function<void()>& f, std::initializer_list<std::string> needles) {
  try {
    f();
  } catch (const InputError& e) {
    const std::string message = e.what();
    for (const std::string& needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos) << "message lacks '" << needle << "':\n" << message;
    }
    return message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected InputError, nothing was thrown";
  return {};
}

}  // namespace meshtrain::io::test
