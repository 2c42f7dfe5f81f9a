// Parallel HDF5 files of named global tensors: the storage under checkpoints (share/docs/usage.md,
// Checkpoints). Written by io/checkpoint/writer.cpp and commit.cpp, read by
// io/checkpoint/reader.cpp and reader_attributes.cpp; the names a checkpoint uses are
// io/checkpoint/schema.hpp's.
//
// io/ knows nothing of models: a tensor is a name ("/model/wte.weight"), its global shape, and the
// hyperslab (offset, extent, and for pieces of several blocks count and stride) a rank holds.
// Every tensor is stored once, float32, in its global shape, so any layout can read what any other
// wrote, and so can h5py and h5dump.
//
// Collectivity: the CheckpointWriter is fully collective over its communicator — constructor,
// write(), every set_attribute(), commit() and the destructor must be called by every rank, in
// the same order, with the same names, shapes and attribute values (write() checks names and
// shapes and throws std::logic_error on every rank if they differ). The CheckpointReader's
// constructor and destructor are collective; everything else is independent, so ranks may read
// different tensors, in any order.
//
// Dataset names are absolute paths in the file ("/model/h.0.ln_1.weight"); a name without the
// leading '/' is taken from the root.
#pragma once

#include "io/checkpoint/slab_range.hpp"

#include <mpi.h>

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace meshtrain::io {

// The part of a global tensor one rank holds, stored contiguously (row-major) in the rank's buffer.
//
// In the simple case (count and stride empty) it is the block [offset, offset + extent) of a
// row-major array of global_shape. In general it is the union, over every multi-index k with
// k[d] < count[d], of the blocks [offset + k·stride, offset + k·stride + extent) — HDF5's regular
// hyperslab with start = offset, stride = stride, count = count, block = extent — and the buffer
// holds its elements in row-major order of their global coordinates. An empty count means all
// ones; an empty stride means all ones (HDF5's default), which suits dimensions whose count or
// extent is 1. Where count[d] is 1, stride[d] is not used and may be anything.
//
// Example, tensor parallelism over tp ranks: c_attn.weight, global [C, 3C] with columns q|k|v,
// where tp rank r holds columns [r·C/tp, (r+1)·C/tp) of each of q, k and v as a local [C, 3C/tp]
// array (each row: its q columns, then its k columns, then its v columns):
//   TensorSlab{name, {C, 3 * C}, {0, r * C / tp}, {C, C / tp}, /*count=*/{1, 3}, /*stride=*/{1, C}}
//
// A valid slab has offset and extent (and count and stride, unless empty) of global_shape's rank,
// stride[d] >= extent[d] wherever count[d] > 1 (blocks never overlap), and every block inside
// global_shape. A rank holding nothing has a zero in extent or count (and may pass a null pointer).
struct TensorSlab {
  std::string name;
  std::vector<std::uint64_t> global_shape;
  std::vector<std::uint64_t> offset;
  std::vector<std::uint64_t> extent;
  std::vector<std::uint64_t> count = {};   // blocks per dimension; empty: one block
  std::vector<std::uint64_t> stride = {};  // distance between block starts; empty: all ones

  // Number of elements in the piece (product of count·extent).
  std::uint64_t elements() const;
  // The whole tensor: offset 0, extent = global_shape, one block.
  static TensorSlab whole(std::string name, std::vector<std::uint64_t> global_shape);
};

// How tensor data travels to the file. Metadata is written collectively either way, and objects of
// 1 MiB or more start on 1 MiB boundaries (whole stripes on parallel file systems).
//   collective   MPI-IO collective buffering: aggregator ranks gather the pieces and write large
//                contiguous blocks; metadata reads are collective too. The HDF Group's advice for
//                many small or strided pieces on a parallel file system.
//   independent  every rank writes its own pieces directly. Each piece of a ZeRO shard or a
//                replica's split is one contiguous run, so nothing is gained by gathering, and no
//                rank waits for another per tensor (bench/bench_checkpoint_io.py measures both).
enum class Transfer { collective, independent };

// A checkpoint that could not be written: a reservation, write, flush, close or rename failed on
// some rank (no space, quota, an I/O error). Every rank throws it at the same call, once the .tmp
// is closed and removed, with the lowest failing rank's message; that rank is the reporter.
class WriteFailed : public std::runtime_error {
 public:
  WriteFailed(const std::string& what, bool reporter) : std::runtime_error(what), reporter_(reporter) {}
  bool reporter() const { return reporter_; }

 private:
  bool reporter_;
};

// "cannot write checkpoint <file>: <reason>; it needs N bytes (.. MiB) and statvfs reports M bytes
// (.. MiB) free on the file system of <dir>": what a failed save tells the user, the free space
// measured now (needed_bytes 0: unknown, left out).
std::string write_failure_message(const std::string& file, const std::string& reason, std::uint64_t needed_bytes);

// Collective: nothing when every rank's `failure` is empty, else the WriteFailed every rank is to
// throw (the lowest failing rank's message). The one agreement every save failure goes through.
std::optional<WriteFailed> agree_on_write_failure(const std::string& failure, MPI_Comm comm);

// What the writer is told of the file before writing it.
struct ExpectedSize {
  std::uint64_t bytes = 0;  // an upper bound of the file's size (CheckpointWriter::planned_bytes); 0: unknown
  bool reserve = true;      // reserve the bytes (fallocate) before any data is written
};

// Writes <final_path>.tmp collectively and renames it to final_path on commit(), so the final name
// only ever holds a complete file. An uncommitted writer (an exception, an early return) removes
// the .tmp when destroyed. Usage errors throw io::h5::Error (std::runtime_error) with a HINT.
//
// A failure of the storage (share/docs/usage.md, A full disk during a save) is never left to one
// rank: each records its own and all agree after the reservation, after each write(), and at each
// phase of commit(), before the next collective step, then throw WriteFailed together, having
// freed and removed the .tmp (its blocks are released before HDF5's closing writes, so the close
// cannot meet the full disk again on one rank and leave the others waiting in it).
class CheckpointWriter {
 public:
  // Creates <final_path>.tmp (truncating a stale one). Throws InputError naming the file if it
  // cannot be created (for example a missing or read-only directory). With expected.bytes and
  // expected.reserve, rank 0 reserves them for the file where its file system can (fallocate), so
  // that a disk or quota too small for the checkpoint is WriteFailed here, before any data.
  // `tmp_path` (empty: <final_path>.tmp, the name checkpoint directories clean up after a killed save)
  // is where the file is written until commit(); a writer that may race another process for
  // final_path (import) passes one unique to it.
  CheckpointWriter(const std::string& final_path, MPI_Comm comm, Transfer transfer = Transfer::collective,
                   ExpectedSize expected = {}, std::string tmp_path = {});
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Creates dataset slab.name (and any missing groups on its path), float32 of slab.global_shape,
  // and writes each rank's piece from data collectively. data holds slab.elements() floats.
  // An invalid slab on any rank throws std::logic_error on every rank.
  // The dataset's attribute `checksum` (uint64, io/checkpoint/tensor_checksum.hpp) is the sum of the ranks'
  // partial checksums, so the pieces must not overlap (replicas write nothing).
  void write(const TensorSlab& slab, const float* data) { write(slab, ElementRange{0, slab.elements()}, data); }
  // The same for a contiguous run of the piece's elements (a ZeRO shard's part of the tensor);
  // data holds range.count floats.
  void write(const TensorSlab& slab, ElementRange range, const float* data);

  // Root attributes (replacing one of the same name). Strings are variable-length UTF-8 (h5py
  // reads them as str), integers int64, reals float64.
  void set_attribute(const std::string& name, const std::string& value);
  void set_attribute(const std::string& name, const char* value) { set_attribute(name, std::string(value)); }
  void set_attribute(const std::string& name, std::int64_t value);
  void set_attribute(const std::string& name, double value);
  template <std::integral Int>
  requires(!std::same_as<Int, bool> && !std::same_as<Int, std::int64_t>) void set_attribute(const std::string& name,
                                                                                            Int value) {
    set_attribute(name, static_cast<std::int64_t>(value));
  }

  // Flushes the file to storage on every rank (MPI_File_sync), closes it, and once every rank has
  // confirmed, rank 0 fsyncs it, renames .tmp to the final path and fsyncs the directory; returns on
  // every rank only once the final file is in place. No other call is allowed afterwards.
  void commit();

  // An upper bound of the bytes a file of float32 datasets of these global shapes takes: the data,
  // the alignment of the large ones and an allowance for HDF5's metadata and the root attributes.
  static std::uint64_t planned_bytes(const std::vector<std::vector<std::uint64_t>>& global_shapes);

  const std::string& path() const { return final_path_; }

 private:
  // This rank's storage failure (the first one), described for the user.
  void note_failure(const std::string& reason);
  // Collective: if any rank noted a failure, abandons the file and throws WriteFailed everywhere.
  void settle();
  // Collective: frees and removes the .tmp, then closes the file (errors ignored: it is discarded).
  void abandon() noexcept;

  struct Impl;
  std::string final_path_;
  std::string tmp_path_;
  std::unique_ptr<Impl> impl_;
};

// Reads any HDF5 file (ours or h5py's) with the MPI-IO driver, read-only. Every fault that a bad
// file can cause — missing, truncated, not HDF5, a missing dataset, a wrong shape or type, a read
// error, a FIFO or directory in its place — is an InputError whose message names the file.
class CheckpointReader {
 public:
  CheckpointReader(const std::string& path, MPI_Comm comm);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& path() const { return path_; }

  // Whether the file holds a dataset of that name.
  bool has(const std::string& dataset) const;
  // The dataset's shape; InputError if there is no such dataset.
  std::vector<std::uint64_t> shape(const std::string& dataset) const;

  // Reads the piece of slab.name that slab describes into out (slab.elements() floats, in the
  // order TensorSlab gives), converting from whatever floating-point type the file holds.
  // InputError if the dataset is missing, is not floating point, or its shape differs from
  // slab.global_shape:
  //   "<file>: /model/h.0.attn.c_attn.weight has shape [768,2304], expected [768,768]".
  // An invalid slab (a block outside global_shape, overlapping blocks, sizes that disagree) is a
  // programming error (std::invalid_argument).
  void read(const TensorSlab& slab, float* out) const { read(slab, ElementRange{0, slab.elements()}, out); }
  // The same for a contiguous run of the piece's elements; out holds range.count floats.
  void read(const TensorSlab& slab, ElementRange range, float* out) const;

  // The dataset's stored `checksum` attribute (io/checkpoint/tensor_checksum.hpp), or nothing if it has none.
  // InputError if the dataset is missing or the attribute is not an integer.
  std::optional<std::uint64_t> checksum(const std::string& dataset) const;

  // Root attributes; nothing if absent. InputError if present with an incompatible type
  // (int_attribute needs an integer; double_attribute takes an integer or a real).
  std::optional<std::string> string_attribute(const std::string& name) const;
  std::optional<std::int64_t> int_attribute(const std::string& name) const;
  std::optional<double> double_attribute(const std::string& name) const;
  // Names of every root attribute, sorted.
  std::vector<std::string> attribute_names() const;

  // Datasets under group (recursively), as paths relative to it, sorted: datasets("/model") gives
  // {"h.0.attn.c_attn.bias", ..., "wte.weight"}; datasets("/optim") gives {"exp_avg/wte.weight", ...}.
  // Empty if the group does not exist.
  std::vector<std::string> datasets(const std::string& group) const;

 private:
  struct Impl;
  std::string path_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshtrain::io
