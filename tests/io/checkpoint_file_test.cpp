// Parallel HDF5 checkpoints, run at 1, 2 and 4 ranks: each rank writes its own block (one holds
// nothing), every rank reads the tensors back whole and in another partition, and the values are
// compared with a closed form computed here. h5py writes files we read and reads files we write.
// Tensor-parallel pieces of several blocks (q|k|v columns of c_attn) are written, read back whole,
// read as another rank's piece, and read from a file h5py wrote. Runs of pieces (what ZeRO shards
// own) are written and read at uneven cuts, and the checksums of every layout agree.
#include "io/checkpoint/file.hpp"

#include "io/checkpoint/tensor_checksum.hpp"
#include "io_test_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifndef MESHTRAIN_PYTHON
#error "MESHTRAIN_PYTHON must name a python3 with h5py and numpy"
#endif

namespace meshtrain::io::test {
namespace checkpoint_file_test {

namespace fs = std::filesystem;
using Shape = std::vector<std::uint64_t>;

// Closed forms for the tensors' elements (exact in float32).
float value2(std::uint64_t i, std::uint64_t j) {
  return static_cast<float>(i) * 100.0f + static_cast<float>(j) * 0.5f + 0.25f;
}
float value3(std::uint64_t a, std::uint64_t b, std::uint64_t d) {
  return static_cast<float>(a) * 1000.0f + static_cast<float>(b) * 10.0f + static_cast<float>(d) + 0.125f;
}
float value1(std::uint64_t i) { return -3.0f + static_cast<float>(i) * 0.75f; }

// [begin, end) of part `index` when n things are split into `parts` near-equal runs.
std::pair<std::uint64_t, std::uint64_t> split(std::uint64_t n, int parts, int index) {
  const std::uint64_t base = n / static_cast<std::uint64_t>(parts);
  const std::uint64_t extra = n % static_cast<std::uint64_t>(parts);
  const auto i = static_cast<std::uint64_t>(index);
  const std::uint64_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

// Fills a block of a 2-D [R, C] tensor from the closed form.
std::vector<float> block2(const TensorSlab& s) {
  std::vector<float> v;
  for (std::uint64_t i = 0; i < s.extent[0]; ++i) {
    for (std::uint64_t j = 0; j < s.extent[1]; ++j) v.push_back(value2(s.offset[0] + i, s.offset[1] + j));
  }
  return v;
}

std::vector<float> block3(const TensorSlab& s) {
  std::vector<float> v;
  for (std::uint64_t a = 0; a < s.extent[0]; ++a) {
    for (std::uint64_t b = 0; b < s.extent[1]; ++b) {
      for (std::uint64_t d = 0; d < s.extent[2]; ++d)
        v.push_back(value3(s.offset[0] + a, s.offset[1] + b, s.offset[2] + d));
    }
  }
  return v;
}

// Row block of rank r: with several ranks the last holds nothing.
TensorSlab row_block(const std::string& name, std::uint64_t rows, std::uint64_t cols, int rank, int size) {
  const int holders = std::max(1, size - 1);
  if (rank >= holders) return TensorSlab{name, {rows, cols}, {rows, 0}, {0, cols}};
  const auto [begin, end] = split(rows, holders, rank);
  return TensorSlab{name, {rows, cols}, {begin, 0}, {end - begin, cols}};
}

constexpr std::uint64_t R = 9, C = 5;         // "/model/w": rows split
constexpr std::uint64_t A = 3, B = 8, D = 4;  // "/model/blocks.0.x": middle dimension split
constexpr std::uint64_t N = 13;               // "/optim/exp_avg/bias": element ranges

// Every rank writes its part of the three tensors and two attributes, and commits.
void write_test_checkpoint(const std::string& path) {
  const int rank = world_rank(), size = world_size();
  CheckpointWriter writer(path, MPI_COMM_WORLD);

  const TensorSlab w = row_block("/model/w", R, C, rank, size);
  const auto wdata = block2(w);
  writer.write(w, wdata.empty() ? nullptr : wdata.data());

  const auto [b0, b1] = split(B, size, rank);
  const TensorSlab x{"model/blocks.0.x", {A, B, D}, {0, b0, 0}, {A, b1 - b0, D}};
  const auto xdata = block3(x);
  writer.write(x, xdata.data());

  const auto [e0, e1] = split(N, size, rank);
  std::vector<float> bias;
  for (std::uint64_t i = e0; i < e1; ++i) bias.push_back(value1(i));
  writer.write(TensorSlab{"/optim/exp_avg/bias", {N}, {e0}, {e1 - e0}}, bias.data());

  writer.set_attribute("format", "meshtrain-checkpoint");
  writer.set_attribute("step", std::int64_t{1234567890123});
  writer.set_attribute("lr", 0.1);
  writer.commit();
}

int run_python(const std::string& script_path, const std::string& script, const std::string& args,
               const std::string& log) {
  int rc = 0;
  if (world_rank() == 0) {
    write_text(script_path, script);
    const std::string command = std::string(MESHTRAIN_PYTHON) + " " + script_path + " " + args + " > " + log + " 2>&1";
    rc = std::system(command.c_str());
  }
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return rc;
}

TEST(CheckpointFile, EachRankWritesItsBlockAndEveryRankReadsAnyLayout) {
  SharedDir dir;
  const std::string path = dir / "step_00000001.h5";
  write_test_checkpoint(path);
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const int rank = world_rank(), size = world_size();
  CheckpointReader reader(path, MPI_COMM_WORLD);
  EXPECT_TRUE(reader.has("/model/w"));
  EXPECT_TRUE(reader.has("model/blocks.0.x"));
  EXPECT_FALSE(reader.has("/model"));  // a group, not a dataset
  EXPECT_FALSE(reader.has("/model/none"));
  EXPECT_FALSE(reader.has("/nothing/here/at/all"));
  EXPECT_EQ(reader.shape("/model/w"), (Shape{R, C}));
  EXPECT_EQ(reader.shape("/model/blocks.0.x"), (Shape{A, B, D}));
  EXPECT_EQ(reader.datasets("/model"), (std::vector<std::string>{"blocks.0.x", "w"}));
  EXPECT_EQ(reader.datasets("/optim"), (std::vector<std::string>{"exp_avg/bias"}));
  EXPECT_EQ(reader.datasets("/"), (std::vector<std::string>{"model/blocks.0.x", "model/w", "optim/exp_avg/bias"}));
  EXPECT_TRUE(reader.datasets("/absent").empty());

  // Whole tensors, on every rank.
  const TensorSlab w_all = TensorSlab::whole("/model/w", {R, C});
  std::vector<float> w(R * C, NAN);
  reader.read(w_all, w.data());
  EXPECT_EQ(w, block2(w_all));

  const TensorSlab x_all = TensorSlab::whole("/model/blocks.0.x", {A, B, D});
  std::vector<float> x(A * B * D, NAN);
  reader.read(x_all, x.data());
  EXPECT_EQ(x, block3(x_all));

  std::vector<float> bias(N, NAN);
  reader.read(TensorSlab::whole("/optim/exp_avg/bias", {N}), bias.data());
  for (std::uint64_t i = 0; i < N; ++i) EXPECT_EQ(bias[i], value1(i)) << "bias[" << i << "]";

  // Another layout: column blocks of w, and the row block another rank wrote.
  const auto [c0, c1] = split(C, size, rank);
  const TensorSlab cols{"/model/w", {R, C}, {0, c0}, {R, c1 - c0}};
  std::vector<float> mine(cols.elements(), NAN);
  reader.read(cols, mine.data());
  EXPECT_EQ(mine, block2(cols));
  const TensorSlab other = row_block("/model/w", R, C, (rank + 1) % size, size);
  std::vector<float> theirs(other.elements(), NAN);
  reader.read(other, theirs.empty() ? nullptr : theirs.data());
  EXPECT_EQ(theirs, block2(other));

  EXPECT_EQ(reader.string_attribute("format"), "meshtrain-checkpoint");
  EXPECT_EQ(reader.int_attribute("step"), 1234567890123);
  EXPECT_EQ(reader.double_attribute("lr"), 0.1);

  // A block outside the tensor is the caller's bug, not the file's.
  std::vector<float> sink(R * C);
  EXPECT_THROW(reader.read(TensorSlab{"/model/w", {R, C}, {R - 1, 0}, {2, C}}, sink.data()), std::invalid_argument);
}

TEST(CheckpointFile, AttributesRoundTrip) {
  SharedDir dir;
  const std::string path = dir / "attrs.h5";
  std::string config;
  for (int i = 0; config.size() < 200000; ++i) config += "[model]\nlayers = " + std::to_string(i) + "  # ünïcödé\n";
  {
    CheckpointWriter writer(path, MPI_COMM_WORLD);
    writer.set_attribute("config", config);
    writer.set_attribute("empty", std::string());
    writer.set_attribute("step", 5);                           // int: through the integral template
    writer.set_attribute("step", std::int64_t{-(1ll << 40)});  // replaces it
    writer.set_attribute("tokens", std::size_t{1} << 33);
    writer.set_attribute("third", 1.0 / 3.0);
    writer.set_attribute("tiny", 1e-300);
    writer.commit();
  }
  CheckpointReader reader(path, MPI_COMM_WORLD);
  EXPECT_EQ(reader.string_attribute("config"), config);
  EXPECT_EQ(reader.string_attribute("empty"), "");
  EXPECT_EQ(reader.int_attribute("step"), -(1ll << 40));
  EXPECT_EQ(reader.int_attribute("tokens"), std::int64_t{1} << 33);
  EXPECT_EQ(reader.double_attribute("third"), 1.0 / 3.0);
  EXPECT_EQ(reader.double_attribute("tiny"), 1e-300);
  EXPECT_EQ(reader.double_attribute("step"), -std::ldexp(1.0, 40));  // integers read as reals too
  EXPECT_FALSE(reader.string_attribute("missing"));
  EXPECT_FALSE(reader.int_attribute("missing"));
  EXPECT_FALSE(reader.double_attribute("missing"));
  EXPECT_EQ(reader.attribute_names(),
            (std::vector<std::string>{"checksum_algorithm", "config", "empty", "step", "third", "tiny", "tokens"}));
  expect_input_error([&] { reader.int_attribute("config"); }, {path, "config", "expected an integer"});
  expect_input_error([&] { reader.int_attribute("third"); }, {path, "third"});
  expect_input_error([&] { reader.string_attribute("step"); }, {path, "step", "expected a string"});
  expect_input_error([&] { reader.double_attribute("config"); }, {path, "config"});
}

TEST(CheckpointFile, ShapeMismatchAndMissingDatasetAreNamed) {
  SharedDir dir;
  const std::string path = dir / "shapes.h5";
  const std::string name = "/model/h.0.attn.c_attn.weight";
  {
    CheckpointWriter writer(path, MPI_COMM_WORLD);
    const TensorSlab whole = TensorSlab::whole(name, {4, 12});
    std::vector<float> data(48, 1.0f);
    // Rank 0 writes everything, the others nothing.
    writer.write(world_rank() == 0 ? whole : TensorSlab{name, {4, 12}, {0, 0}, {0, 12}}, data.data());
    writer.commit();
  }
  CheckpointReader reader(path, MPI_COMM_WORLD);
  std::vector<float> out(48);
  const std::string message = expect_input_error(
      [&] {
        reader.read(TensorSlab::whole(name, {4, 4}), out.data());
      },
      {path});
  EXPECT_EQ(message, path + ": /model/h.0.attn.c_attn.weight has shape [4,12], expected [4,4]");
  expect_input_error([&] { reader.read(TensorSlab::whole(name, {48}), out.data()); }, {"[4,12]", "[48]"});
  expect_input_error(
      [&] {
        reader.read(TensorSlab::whole("/model/wte.weight", {4, 12}), out.data());
      },
      {path, "/model/wte.weight"});
  expect_input_error([&] { reader.shape("/model/wpe.weight"); }, {path, "/model/wpe.weight"});
  // The right shape reads the ones written by rank 0.
  reader.read(TensorSlab::whole(name, {4, 12}), out.data());
  EXPECT_EQ(out, std::vector<float>(48, 1.0f));
}

// Values that are not finite are refused as they are read, by the rank whose piece holds them,
// naming the tensor and the element's global row-major index (here row 6, column 3 of [9, 5]),
// though the file's checksums (computed by the writer) are right.
TEST(CheckpointFile, NonFiniteValuesAreRefusedNamingTheElement) {
  SharedDir dir;
  const std::string path = dir / "nan.h5";
  const std::uint64_t bad = 6 * C + 3;
  {
    CheckpointWriter writer(path, MPI_COMM_WORLD);
    const TensorSlab s =
        world_rank() == 0 ? TensorSlab::whole("/model/w", {R, C}) : TensorSlab{"/model/w", {R, C}, {0, 0}, {0, C}};
    std::vector<float> data(R * C, 0.5f);
    data[bad] = std::numeric_limits<float>::quiet_NaN();
    writer.write(s, data.data());
    writer.commit();
  }
  CheckpointReader reader(path, MPI_COMM_WORLD);
  std::vector<float> out(R * C);
  expect_input_error(
      [&] {
        reader.read(TensorSlab::whole("/model/w", {R, C}), out.data());
      },
      {path, "/model/w", "nan", "element 33"});
  // A run of rows 5..7 read as the last part of a piece: the element keeps its global index.
  const TensorSlab rows{"/model/w", {R, C}, {4, 0}, {4, C}};
  expect_input_error([&] { reader.read(rows, ElementRange{C + 2, 2 * C}, out.data()); }, {"element 33"});
  // Rows without it read.
  reader.read(TensorSlab{"/model/w", {R, C}, {0, 0}, {6, C}}, out.data());
  EXPECT_EQ(out[0], 0.5f);
}

// An HDF5 file declaring far more than it stores (h5py's create_dataset without data) is refused
// from its metadata, before anything is allocated: shape() and read() name the dataset and sizes.
TEST(CheckpointFile, DeclaredSizesBeyondTheStoredBytesAreRefused) {
  SharedDir dir;
  const std::string path = dir / "huge.h5";
  const std::string script =
      "import h5py, sys\nwith h5py.File(sys.argv[1], 'w') as f:\n"
      "    f.create_dataset('model/wte.weight', shape=(100000, 1000000), dtype='f4')\n";
  ASSERT_EQ(run_python(dir / "make.py", script, path, dir / "make.log"), 0) << read_text(dir / "make.log");
  CheckpointReader reader(path, MPI_COMM_WORLD);
  expect_input_error([&] { reader.shape("/model/wte.weight"); },
                     {path, "/model/wte.weight", "[100000,1000000]", "400000000000 bytes", "at most 0 bytes"});
  float one = 0;
  expect_input_error(
      [&] {
        reader.read(TensorSlab{"/model/wte.weight", {100000, 1000000}, {0, 0}, {1, 1}}, &one);
      },
      {"/model/wte.weight", "400000000000 bytes"});
}

TEST(CheckpointFile, UncommittedWriterLeavesNoFile) {
  SharedDir dir;
  const std::string path = dir / "step_00000002.h5";
  {
    CheckpointWriter writer(path, MPI_COMM_WORLD);
    std::vector<float> data(R * C, 2.0f);
    const TensorSlab s = row_block("/model/w", R, C, world_rank(), world_size());
    writer.write(s, data.data());
    EXPECT_TRUE(fs::exists(path + ".tmp"));
    EXPECT_FALSE(fs::exists(path));
    // Every rank looks before any destroys its writer: the first to do so removes the temporary.
    MPI_Barrier(MPI_COMM_WORLD);
  }  // destroyed without commit(), as when an exception unwinds
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(CheckpointFile, RanksThatDisagreeOnATensorAllThrowAndLeaveNoFile) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  SharedDir dir;
  const std::string path = dir / "step_00000003.h5";
  {
    CheckpointWriter writer(path, MPI_COMM_WORLD);
    std::vector<float> data(4, 0.0f);
    const std::uint64_t n = world_rank() == 1 ? 5 : 4;
    EXPECT_THROW(writer.write(TensorSlab{"/model/b", {n}, {0}, {0}}, data.data()), std::logic_error);
    EXPECT_THROW(writer.write(TensorSlab{"/model/c", {4}, {world_rank() == 1 ? 3u : 0u}, {4}}, data.data()),
                 std::logic_error);
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(CheckpointFile, HdfFailuresNameTheTensorTheFileAndAHint) {
  SharedDir dir;
  const std::string path = dir / "twice.h5";
  CheckpointWriter writer(path, MPI_COMM_WORLD);
  std::vector<float> data(6, 1.0f);
  const TensorSlab x{"/model/x", {6}, {0}, {world_rank() == 0 ? 6u : 0u}};
  writer.write(x, data.data());
  try {
    writer.write(x, data.data());
    ADD_FAILURE() << "writing /model/x twice did not throw";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("writing /model/x to " + path + ".tmp"), std::string::npos) << message;
    EXPECT_NE(message.find("H5Dcreate2"), std::string::npos) << message;
    EXPECT_NE(message.find("already exists"), std::string::npos) << message;
    EXPECT_NE(message.find("HINT: "), std::string::npos) << message;
  }
}

TEST(CheckpointFile, CommitReplacesAnOlderFileOfTheSameName) {
  SharedDir dir;
  const std::string path = dir / "again.h5";
  for (float value : {1.0f, 2.0f}) {
    CheckpointWriter writer(path, MPI_COMM_WORLD);
    std::vector<float> data(3, value);
    writer.write(TensorSlab{"/v", {3}, {0}, {world_rank() == 0 ? 3u : 0u}}, data.data());
    writer.commit();
  }
  CheckpointReader reader(path, MPI_COMM_WORLD);
  std::vector<float> out(3);
  reader.read(TensorSlab::whole("/v", {3}), out.data());
  EXPECT_EQ(out, std::vector<float>(3, 2.0f));
}

TEST(CheckpointFile, BadFilesAreInputErrorsNamingTheFile) {
  SharedDir dir;
  const std::string good = dir / "good.h5";
  write_test_checkpoint(good);
  const std::string half = dir / "half.h5", tiny = dir / "tiny.h5", text = dir / "notes.h5", empty = dir / "empty.h5";
  if (world_rank() == 0) {
    const auto bytes = read_bytes(good);
    write_bytes(half, std::vector<unsigned char>(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() / 2)));
    write_bytes(tiny, std::vector<unsigned char>(bytes.begin(), bytes.begin() + 10));
    write_text(text, "step = 100\nthis is not HDF5\n");
    write_text(empty, "");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  expect_input_error([&] { CheckpointReader r(half, MPI_COMM_WORLD); }, {half, "truncated"});
  // Ten bytes hold the 8-byte signature: an HDF5 file, but one that cannot be opened.
  expect_input_error([&] { CheckpointReader r(tiny, MPI_COMM_WORLD); }, {tiny, "cannot be opened as HDF5"});
  expect_input_error([&] { CheckpointReader r(text, MPI_COMM_WORLD); }, {text, "not an HDF5 file"});
  expect_input_error([&] { CheckpointReader r(empty, MPI_COMM_WORLD); }, {empty, "not an HDF5 file"});
  expect_input_error([&] { CheckpointReader r(dir / "missing.h5", MPI_COMM_WORLD); },
                     {dir / "missing.h5", "no such file"});
  expect_input_error([&] { CheckpointReader r(dir.path(), MPI_COMM_WORLD); }, {dir.path(), "not a regular file"});
  expect_input_error([&] { CheckpointWriter w(dir / "no/such/dir/x.h5", MPI_COMM_WORLD); }, {dir / "no/such/dir/x.h5"});
}

constexpr const char* h5py_writer = R"(import sys
import h5py
import numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["model/a"] = (np.arange(12, dtype=np.float64) * 0.5 + 0.25).reshape(3, 4)
    f["model/b"] = np.array([0.1, -2.5, 1e30], dtype=np.float64)
    f["model/deep/c"] = np.arange(6, dtype=np.float32).reshape(2, 3)
    f["model/half"] = np.array([1.5, -0.25], dtype=np.float16)
    f["model/n"] = np.arange(2, dtype=np.int32)
    f.attrs["s"] = "hello w\u00f6rld"
    f.attrs["i"] = np.int64(-42)
    f.attrs["d"] = 0.125
    f.attrs["fixed"] = np.bytes_(b"fixed")
)";

TEST(CheckpointFile, ReadsWhatH5pyWrote) {
  SharedDir dir;
  const std::string path = dir / "from_h5py.h5";
  const int rc = run_python(dir / "write.py", h5py_writer, path, dir / "write.log");
  ASSERT_EQ(rc, 0) << "python failed:\n" << (world_rank() == 0 ? read_text(dir / "write.log") : "");

  CheckpointReader reader(path, MPI_COMM_WORLD);
  EXPECT_EQ(reader.datasets("/model"), (std::vector<std::string>{"a", "b", "deep/c", "half", "n"}));
  EXPECT_EQ(reader.shape("/model/a"), (Shape{3, 4}));
  std::vector<float> a(12, NAN);
  reader.read(TensorSlab::whole("/model/a", {3, 4}), a.data());
  for (int k = 0; k < 12; ++k) EXPECT_EQ(a[k], static_cast<float>(k) * 0.5f + 0.25f) << "a[" << k << "]";
  // A block of a float64 dataset, converted.
  std::vector<float> a_block(2, NAN);
  reader.read(TensorSlab{"/model/a", {3, 4}, {1, 2}, {1, 2}}, a_block.data());
  EXPECT_EQ(a_block, (std::vector<float>{3.25f, 3.75f}));
  std::vector<float> b(3, NAN);
  reader.read(TensorSlab::whole("/model/b", {3}), b.data());
  EXPECT_EQ(b, (std::vector<float>{static_cast<float>(0.1), -2.5f, static_cast<float>(1e30)}));
  std::vector<float> c(6, NAN);
  reader.read(TensorSlab::whole("model/deep/c", {2, 3}), c.data());
  EXPECT_EQ(c, (std::vector<float>{0, 1, 2, 3, 4, 5}));
  std::vector<float> half(2, NAN);
  reader.read(TensorSlab::whole("/model/half", {2}), half.data());
  EXPECT_EQ(half, (std::vector<float>{1.5f, -0.25f}));
  std::vector<float> n(2);
  expect_input_error([&] { reader.read(TensorSlab::whole("/model/n", {2}), n.data()); },
                     {path, "/model/n", "integer", "floating-point"});

  EXPECT_EQ(reader.string_attribute("s"), "hello w\u00f6rld");
  EXPECT_EQ(reader.string_attribute("fixed"), "fixed");
  EXPECT_EQ(reader.int_attribute("i"), -42);
  EXPECT_EQ(reader.double_attribute("d"), 0.125);
}

constexpr const char* h5py_reader = R"(import sys
import h5py
import numpy as np
path, rows, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with h5py.File(path, "r") as f:
    w = f["model/w"]
    assert w.dtype == np.float32, w.dtype
    assert w.shape == (rows, cols), w.shape
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    expected = (i * 100.0 + j * 0.5 + 0.25).astype(np.float32)
    assert np.array_equal(w[...], expected), (w[...], expected)
    x = f["model/blocks.0.x"][...]
    a, b, d = np.meshgrid(np.arange(3), np.arange(8), np.arange(4), indexing="ij")
    assert np.array_equal(x, (a * 1000.0 + b * 10.0 + d + 0.125).astype(np.float32)), x
    bias = f["optim/exp_avg/bias"][...]
    assert np.array_equal(bias, (-3.0 + np.arange(13) * 0.75).astype(np.float32)), bias
    fmt = f.attrs["format"]
    assert isinstance(fmt, str) and fmt == "meshtrain-checkpoint", repr(fmt)
    assert f.attrs["step"] == 1234567890123 and f.attrs["step"].dtype == np.int64, repr(f.attrs["step"])
    assert f.attrs["lr"] == 0.1 and f.attrs["lr"].dtype == np.float64, repr(f.attrs["lr"])
print("OK")
)";

TEST(CheckpointFile, H5pyReadsWhatWeWrote) {
  SharedDir dir;
  const std::string path = dir / "for_h5py.h5";
  write_test_checkpoint(path);
  const int rc = run_python(dir / "read.py", h5py_reader, path + " " + std::to_string(R) + " " + std::to_string(C),
                            dir / "read.log");
  EXPECT_EQ(rc, 0) << "python's checks failed:\n" << (world_rank() == 0 ? read_text(dir / "read.log") : "");
  if (world_rank() == 0) {
    EXPECT_EQ(read_text(dir / "read.log"), "OK\n");
  }
}

// --- Pieces of several blocks: tensor parallelism ---------------------------------------------

constexpr std::uint64_t QC = 8;  // c_attn of a model of width QC: weight [QC, 3QC], bias [3QC]

// Tensor-parallel rank r of tp holds columns [r·QC/tp, (r+1)·QC/tp) of each of q, k and v.
TensorSlab qkv_weight(const std::string& name, int tp, int r) {
  const std::uint64_t w = QC / static_cast<std::uint64_t>(tp), at = static_cast<std::uint64_t>(r) * w;
  return TensorSlab{name, {QC, 3 * QC}, {0, at}, {QC, w}, {1, 3}, {1, QC}};
}
TensorSlab qkv_bias(const std::string& name, int tp, int r) {
  const std::uint64_t w = QC / static_cast<std::uint64_t>(tp), at = static_cast<std::uint64_t>(r) * w;
  return TensorSlab{name, {3 * QC}, {at}, {w}, {3}, {QC}};
}

// The local layout tensor parallelism wants, written out by hand: a row-major [QC, 3QC/tp] array
// whose row i holds row i's q columns of rank r, then its k columns, then its v columns.
std::vector<float> qkv_weight_local(int tp, int r) {
  const std::uint64_t w = QC / static_cast<std::uint64_t>(tp), at = static_cast<std::uint64_t>(r) * w;
  std::vector<float> v;
  for (std::uint64_t i = 0; i < QC; ++i) {
    for (std::uint64_t j = 0; j < 3; ++j) {
      for (std::uint64_t c = 0; c < w; ++c) v.push_back(value2(i, at + j * QC + c));
    }
  }
  return v;
}
std::vector<float> qkv_bias_local(int tp, int r) {
  const std::uint64_t w = QC / static_cast<std::uint64_t>(tp), at = static_cast<std::uint64_t>(r) * w;
  std::vector<float> v;
  for (std::uint64_t j = 0; j < 3; ++j) {
    for (std::uint64_t c = 0; c < w; ++c) v.push_back(value1(at + j * QC + c));
  }
  return v;
}

// The closed-form values of any piece of a 1-, 2- or 3-D tensor, found without hyperslab
// arithmetic: walk every element of the global tensor in row-major order and keep those that lie
// in one of the piece's blocks.
std::vector<float> piece_values(const TensorSlab& s) {
  const std::size_t rank = s.global_shape.size();
  std::vector<float> v;
  if (std::find(s.global_shape.begin(), s.global_shape.end(), 0u) != s.global_shape.end()) return v;
  Shape at(rank, 0);
  while (true) {
    bool inside = true;
    for (std::size_t d = 0; d < rank && inside; ++d) {
      const std::uint64_t count = s.count.empty() ? 1 : s.count[d];
      const std::uint64_t stride = s.stride.empty() ? 1 : s.stride[d];
      if (at[d] < s.offset[d]) {
        inside = false;
        continue;
      }
      const std::uint64_t from = at[d] - s.offset[d];
      const std::uint64_t block = count > 1 ? from / stride : 0;  // the block this coordinate could be in
      inside = block < count && from - block * stride < s.extent[d];
    }
    if (inside) {
      v.push_back(rank == 1 ? value1(at[0]) : rank == 2 ? value2(at[0], at[1]) : value3(at[0], at[1], at[2]));
    }
    std::size_t d = rank;
    while (d > 0 && ++at[d - 1] == s.global_shape[d - 1]) at[--d] = 0;
    if (d == 0) return v;
  }
}

// A [QC, 3QC] c_attn split into uneven q|k|v column pieces among all ranks but the last, which
// (with several ranks) holds nothing.
TensorSlab uneven_qkv(const std::string& name, int rank, int size) {
  const int holders = std::max(1, size - 1);
  if (rank >= holders) return TensorSlab{name, {QC, 3 * QC}, {0, 0}, {QC, 0}, {1, 3}, {1, QC}};
  const auto [begin, end] = split(QC, holders, rank);
  return TensorSlab{name, {QC, 3 * QC}, {0, begin}, {QC, end - begin}, {1, 3}, {1, QC}};
}

// [A, B, D] dealt out cyclically over a p1 × p2 grid of ranks (p2 = 2 from two ranks on): rank
// (r1, r2) holds the elements b ≡ r1 (mod p1) of dimension 1 and d ≡ r2 (mod p2) of dimension 2 —
// at 4 ranks, several blocks in two dimensions at once — and a stride, unused, where the count is 1.
TensorSlab cyclic_x(const std::string& name, int rank, int size) {
  const std::uint64_t p2 = size >= 2 ? 2 : 1, p1 = static_cast<std::uint64_t>(size) / p2;
  const std::uint64_t r1 = static_cast<std::uint64_t>(rank) / p2, r2 = static_cast<std::uint64_t>(rank) % p2;
  return TensorSlab{name, {A, B, D}, {0, r1, r2}, {A, 1, 1}, {1, B / p1, D / p2}, {7, p1, p2}};
}

TEST(CheckpointFile, TensorParallelPiecesOfSeveralBlocksRoundTrip) {
  const int rank = world_rank(), size = world_size();
  ASSERT_EQ(QC % static_cast<std::uint64_t>(size), 0u);
  ASSERT_EQ(B % static_cast<std::uint64_t>(size), 0u);
  EXPECT_EQ(qkv_weight("w", size, rank).elements(), QC * 3 * QC / static_cast<std::uint64_t>(size));
  EXPECT_EQ(qkv_bias("b", size, rank).elements(), 3 * QC / static_cast<std::uint64_t>(size));

  SharedDir dir;
  const std::string path = dir / "tp.h5";
  const std::string wname = "/model/h.0.attn.c_attn.weight", bname = "/model/h.0.attn.c_attn.bias";
  {
    CheckpointWriter writer(path, MPI_COMM_WORLD);
    const auto wdata = qkv_weight_local(size, rank);
    writer.write(qkv_weight(wname, size, rank), wdata.data());
    const auto bdata = qkv_bias_local(size, rank);
    writer.write(qkv_bias(bname, size, rank), bdata.data());
    const TensorSlab uneven = uneven_qkv("/model/uneven", rank, size);
    const auto udata = piece_values(uneven);
    EXPECT_EQ(udata.size(), uneven.elements());
    writer.write(uneven, udata.empty() ? nullptr : udata.data());
    const TensorSlab x = cyclic_x("/model/x", rank, size);
    const auto xdata = piece_values(x);
    EXPECT_EQ(xdata.size(), x.elements());
    writer.write(x, xdata.data());
    writer.commit();
  }

  CheckpointReader reader(path, MPI_COMM_WORLD);
  // Whole tensors, on every rank: every element was written, in the right place.
  const TensorSlab w_all = TensorSlab::whole(wname, {QC, 3 * QC});
  std::vector<float> w(QC * 3 * QC, NAN);
  reader.read(w_all, w.data());
  EXPECT_EQ(w, block2(w_all));
  std::vector<float> u(QC * 3 * QC, NAN);
  reader.read(TensorSlab::whole("/model/uneven", {QC, 3 * QC}), u.data());
  EXPECT_EQ(u, block2(w_all));
  std::vector<float> b(3 * QC, NAN);
  reader.read(TensorSlab::whole(bname, {3 * QC}), b.data());
  for (std::uint64_t i = 0; i < 3 * QC; ++i) EXPECT_EQ(b[i], value1(i)) << "bias[" << i << "]";
  const TensorSlab x_all = TensorSlab::whole("/model/x", {A, B, D});
  std::vector<float> x(A * B * D, NAN);
  reader.read(x_all, x.data());
  EXPECT_EQ(x, block3(x_all));

  // The piece another rank wrote, in that rank's local layout.
  const int other = (rank + 1) % size;
  std::vector<float> theirs(qkv_weight(wname, size, other).elements(), NAN);
  reader.read(qkv_weight(wname, size, other), theirs.data());
  EXPECT_EQ(theirs, qkv_weight_local(size, other));
  std::vector<float> their_bias(qkv_bias(bname, size, other).elements(), NAN);
  reader.read(qkv_bias(bname, size, other), their_bias.data());
  EXPECT_EQ(their_bias, qkv_bias_local(size, other));
  const TensorSlab their_uneven = uneven_qkv("/model/uneven", other, size);
  std::vector<float> uneven(their_uneven.elements(), NAN);
  reader.read(their_uneven, uneven.empty() ? nullptr : uneven.data());
  EXPECT_EQ(uneven, piece_values(their_uneven));
  const TensorSlab their_x = cyclic_x("/model/x", other, size);
  std::vector<float> xs(their_x.elements(), NAN);
  reader.read(their_x, xs.data());
  EXPECT_EQ(xs, piece_values(their_x));

  // Any tensor-parallel degree reads what this one wrote.
  for (int tp : {1, 2, 4, 8}) {
    for (int r = 0; r < tp; ++r) {
      std::vector<float> piece(QC * 3 * QC / static_cast<std::uint64_t>(tp), NAN);
      reader.read(qkv_weight(wname, tp, r), piece.data());
      EXPECT_EQ(piece, qkv_weight_local(tp, r)) << "tp " << tp << " rank " << r;
      std::vector<float> bias_piece(3 * QC / static_cast<std::uint64_t>(tp), NAN);
      reader.read(qkv_bias(bname, tp, r), bias_piece.data());
      EXPECT_EQ(bias_piece, qkv_bias_local(tp, r)) << "tp " << tp << " rank " << r;
    }
  }
}

constexpr const char* h5py_qkv_writer = R"(import sys
import h5py
import numpy as np
c = int(sys.argv[2])
with h5py.File(sys.argv[1], "w") as f:
    i, j = np.meshgrid(np.arange(c), np.arange(3 * c), indexing="ij")
    f["model/c_attn.weight"] = i * 100.0 + j * 0.5 + 0.25
    f["model/c_attn.bias"] = (-3.0 + np.arange(3 * c) * 0.75).astype(np.float32)
    a, b, d = np.meshgrid(np.arange(3), np.arange(8), np.arange(4), indexing="ij")
    f["model/x"] = a * 1000.0 + b * 10.0 + d + 0.125
)";

TEST(CheckpointFile, ReadsPiecesOfSeveralBlocksFromWhatH5pyWrote) {
  SharedDir dir;
  const std::string path = dir / "qkv_from_h5py.h5";
  const int rc =
      run_python(dir / "write_qkv.py", h5py_qkv_writer, path + " " + std::to_string(QC), dir / "write_qkv.log");
  ASSERT_EQ(rc, 0) << "python failed:\n" << (world_rank() == 0 ? read_text(dir / "write_qkv.log") : "");

  CheckpointReader reader(path, MPI_COMM_WORLD);
  for (int tp : {1, 2, 4, 8}) {
    for (int r = 0; r < tp; ++r) {
      std::vector<float> piece(QC * 3 * QC / static_cast<std::uint64_t>(tp), NAN);
      reader.read(qkv_weight("/model/c_attn.weight", tp, r), piece.data());  // float64, converted
      EXPECT_EQ(piece, qkv_weight_local(tp, r)) << "tp " << tp << " rank " << r;
      std::vector<float> bias_piece(3 * QC / static_cast<std::uint64_t>(tp), NAN);
      reader.read(qkv_bias("model/c_attn.bias", tp, r), bias_piece.data());
      EXPECT_EQ(bias_piece, qkv_bias_local(tp, r)) << "tp " << tp << " rank " << r;
    }
  }
  for (int size : {1, 2, 4, 8}) {
    for (int r = 0; r < size; ++r) {
      const TensorSlab piece = cyclic_x("/model/x", r, size);
      std::vector<float> values(piece.elements(), NAN);
      reader.read(piece, values.data());
      EXPECT_EQ(values, piece_values(piece)) << "cyclic over " << size << ", rank " << r;
    }
  }
  // Blocks in every dimension at once, abutting in dimension 0 (stride = extent).
  const TensorSlab corners{"/model/x", {A, B, D}, {0, 1, 0}, {1, 2, 1}, {3, 2, 2}, {1, 5, 3}};
  std::vector<float> values(corners.elements(), NAN);
  ASSERT_EQ(values.size(), 24u);
  reader.read(corners, values.data());
  EXPECT_EQ(values, piece_values(corners));
  EXPECT_EQ(values[0], value3(0, 1, 0));
  EXPECT_EQ(values[1], value3(0, 1, 3));
  EXPECT_EQ(values[2], value3(0, 2, 0));
  EXPECT_EQ(values[4], value3(0, 6, 0));
  EXPECT_EQ(values[8], value3(1, 1, 0));
  EXPECT_EQ(values[23], value3(2, 7, 3));
}

TEST(CheckpointFile, InvalidPiecesOfSeveralBlocksAreRejected) {
  SharedDir dir;
  const std::string path = dir / "pieces.h5";
  write_test_checkpoint(path);  // "/model/w" is [R, C] = [9, 5]
  CheckpointReader reader(path, MPI_COMM_WORLD);
  std::vector<float> sink(R * C, NAN);
  const auto rejected = [&](const TensorSlab& s, const std::string& why) {
    try {
      reader.read(s, sink.data());
      ADD_FAILURE() << "accepted a slab with " << why;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "a slab with " << why << " threw something other than std::invalid_argument: " << e.what();
    }
  };
  constexpr std::uint64_t huge = std::numeric_limits<std::uint64_t>::max();
  rejected(TensorSlab{"/model/w", {R, C}, {0, 0}, {R, 2}, {1, 2}, {1, 1}}, "overlapping blocks in dimension 1");
  // An empty stride is all ones: blocks of 2 rows one row apart overlap.
  rejected(TensorSlab{"/model/w", {R, C}, {0, 0}, {2, 1}, {2, 1}, {}}, "overlapping blocks in dimension 0");
  rejected(TensorSlab{"/model/w", {R, C}, {0, 1}, {R, 2}, {1, 2}, {1, 3}}, "outside the global shape");  // to column 6
  // A count of 2^63 blocks of 2 rows: 2^64 elements, which is 0 in 64 bits, but not an empty piece.
  rejected(TensorSlab{"/model/w", {R, C}, {0, 0}, {2, 1}, {std::uint64_t{1} << 63, 1}, {2, 1}},
           "outside the global shape");
  rejected(TensorSlab{"/model/w", {R, C}, {0, 4}, {R, 1}, {1, 2}, {1, 1}}, "outside the global shape");
  rejected(TensorSlab{"/model/w", {R, C}, {0, 0}, {R, 1}, {1, 2}, {1, huge}}, "outside the global shape");
  rejected(TensorSlab{"/model/w", {R, C}, {0, 0}, {R, 1}, {1, huge}, {1, 1}}, "outside the global shape");
  rejected(TensorSlab{"/model/w", {R, C}, {0, 0}, {R, 1}, {2}, {1, 1}}, "count [2] and stride [1,1]");
  rejected(TensorSlab{"/model/w", {R, C}, {0, 0}, {R, 1}, {}, {1, 1, 1}}, "count [] and stride [1,1,1]");
  // A null buffer for a piece with elements in it.
  EXPECT_THROW(reader.read(TensorSlab{"/model/w", {R, C}, {0, 0}, {R, 1}, {1, 2}, {1, 2}}, nullptr),
               std::invalid_argument);

  // Edge cases that are valid: the last block ending at the edge, abutting blocks, any stride
  // (even 0) where the count is 1, and a count of 0 (nothing, so no buffer is needed).
  const TensorSlab to_edge{"/model/w", {R, C}, {1, 0}, {R - 1, 2}, {1, 2}, {1, 3}};
  std::vector<float> v(to_edge.elements(), NAN);
  EXPECT_NO_THROW(reader.read(to_edge, v.data()));
  EXPECT_EQ(v, piece_values(to_edge));
  const TensorSlab abutting{"/model/w", {R, C}, {0, 0}, {R, 1}, {1, C}, {0, 1}};
  v.assign(abutting.elements(), NAN);
  EXPECT_NO_THROW(reader.read(abutting, v.data()));
  EXPECT_EQ(v, block2(TensorSlab::whole("/model/w", {R, C})));
  const TensorSlab unused_stride{"/model/w", {R, C}, {2, 1}, {3, 2}, {1, 1}, {0, huge}};
  v.assign(unused_stride.elements(), NAN);
  EXPECT_NO_THROW(reader.read(unused_stride, v.data()));
  EXPECT_EQ(v, block2(unused_stride));
  const TensorSlab none{"/model/w", {R, C}, {0, 0}, {R, C}, {1, 0}, {1, 1}};
  EXPECT_EQ(none.elements(), 0u);
  EXPECT_NO_THROW(reader.read(none, nullptr));

  // The writer rejects them too, on every rank, even when only the last rank's piece is bad.
  const std::string bad = dir / "bad.h5";
  {
    CheckpointWriter writer(bad, MPI_COMM_WORLD);
    const bool last = world_rank() == world_size() - 1;
    std::vector<float> data(R * C, 1.0f);
    const TensorSlab overlapping{"/model/w", {R, C}, {0, 0}, {R, 2}, {1, 2}, {1, last ? 1u : 2u}};
    try {
      writer.write(overlapping, data.data());
      ADD_FAILURE() << "the writer accepted overlapping blocks";
    } catch (const std::logic_error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(last ? "overlapping blocks" : "another rank"), std::string::npos) << message;
    }
    const TensorSlab outside{"/model/v", {C}, {0}, {2}, {2}, {last ? 4u : 3u}};
    EXPECT_THROW(writer.write(outside, data.data()), std::logic_error);
  }
  EXPECT_FALSE(fs::exists(bad));
  EXPECT_FALSE(fs::exists(bad + ".tmp"));
}

// --- Runs of pieces (ZeRO shards) and checksums ----------------------------------------------

// Cut n elements into `parts` runs at uneven places (part 0 the shortest), the way ZeRO's padded
// units cut tensors anywhere, mid-row and mid-block.
std::pair<std::uint64_t, std::uint64_t> uneven_run(std::uint64_t n, int parts, int index) {
  const auto at = [&](int k) {
    return k == 0 ? 0 : k == parts ? n : std::min(n, n * std::uint64_t(k) / std::uint64_t(parts) + 3);
  };
  return {at(index), at(index + 1)};
}

// The same pieces as piece_values, but as global row-major indices (for checksums by hand).
std::vector<float> whole_values(const Shape& shape) { return piece_values(TensorSlab::whole("x", shape)); }

TEST(CheckpointFile, ChecksumIsMurmurFinalizerSummedOverIndexAndBits) {
  // Worked by hand (python, wrapping uint64): fmix64(1) and the term of 1.5f at index 3.
  EXPECT_EQ(fmix64(1), 0x108e18f069e3e6caull);
  EXPECT_EQ(element_hash(3, 1.5f), 0x16a01627b7da23b9ull);
  const std::vector<float> v = {0.5f, -2.0f, 1.5f, 7.0f};
  std::uint64_t sum = 0;
  for (std::uint64_t i = 0; i < v.size(); ++i) sum += element_hash(i, v[i]);
  EXPECT_EQ(tensor_checksum(v.data(), v.size()), sum);
  std::vector<float> swapped = {-2.0f, 0.5f, 1.5f, 7.0f};  // same values, other places
  EXPECT_NE(tensor_checksum(swapped.data(), swapped.size()), sum);
  std::vector<float> one_bit_off = {0.5f, -2.0f, 1.5f, 7.0f};
  one_bit_off[1] = std::nextafter(-2.0f, 0.0f);  // one bit of one element
  EXPECT_NE(tensor_checksum(one_bit_off.data(), one_bit_off.size()), sum);
}

TEST(CheckpointFile, RunsOfPiecesMapToTheirGlobalElements) {
  // Every run of every piece, against the piece's elements found by walking the whole tensor.
  const std::vector<TensorSlab> pieces = {qkv_weight("w", 2, 1), qkv_bias("b", 4, 3), cyclic_x("x", 3, 4),
                                          TensorSlab::whole("v", {N}), TensorSlab{"r", {R, C}, {1, 1}, {3, 4}}};
  for (const TensorSlab& piece : pieces) {
    const std::vector<float> values = piece_values(piece);
    const std::vector<float> whole = whole_values(piece.global_shape);
    ASSERT_EQ(values.size(), piece.elements());
    for (std::uint64_t first = 0; first < values.size(); first += 5) {
      for (std::uint64_t count : {std::uint64_t{1}, std::uint64_t{7}, values.size() - first}) {
        count = std::min(count, values.size() - first);
        const ElementRange range{first, count};
        // Runs: consecutive global indices whose closed-form values are the run's.
        std::uint64_t covered = 0;
        for_each_global_run(piece, range, [&](std::uint64_t index, std::uint64_t position, std::uint64_t length) {
          EXPECT_EQ(position, covered) << piece.name;
          for (std::uint64_t k = 0; k < length; ++k)
            EXPECT_EQ(whole[index + k], values[first + position + k]) << piece.name;
          covered += length;
        });
        EXPECT_EQ(covered, count) << piece.name;
        // Boxes: together they hold exactly the run's elements.
        std::uint64_t in_boxes = 0;
        for (const GlobalBox& box : range_boxes(piece, range)) {
          std::uint64_t n = 1;
          for (std::size_t d = 0; d < box.extent.size(); ++d) {
            n *= box.extent[d];
            EXPECT_LE(box.start[d] + box.extent[d], piece.global_shape[d]) << piece.name;
          }
          in_boxes += n;
        }
        EXPECT_EQ(in_boxes, count) << piece.name << " first " << first << " count " << count;
      }
    }
  }
}

TEST(CheckpointFile, RanksWriteUnevenRunsOfOnePieceAndEveryLayoutAgreesOnTheChecksum) {
  const int rank = world_rank(), size = world_size();
  SharedDir dir;
  const std::string path = dir / "runs.h5";
  // Every rank holds the same tensor-parallel piece (replicas over dp) and writes an uneven run of
  // it, as ZeRO owners do; the 3-D cyclic piece and a whole vector likewise.
  const TensorSlab w = qkv_weight("/model/w", 2, 1), x = cyclic_x("/model/x", 0, 1),
                   v = TensorSlab::whole("/model/v", {N});
  {
    CheckpointWriter writer(path, MPI_COMM_WORLD);
    for (const TensorSlab& piece : {w, x, v}) {
      const std::vector<float> values = piece_values(piece);
      const auto [first, last] = uneven_run(values.size(), size, rank);
      writer.write(piece, ElementRange{first, last - first}, values.data() + first);
    }
    writer.commit();
  }
  CheckpointReader reader(path, MPI_COMM_WORLD);
  // Whole tensor x is the cyclic piece of one rank: the whole [A, B, D].
  for (const TensorSlab& piece : {w, x, v}) {
    const std::vector<float> values = piece_values(piece);
    // The piece back, whole and as another rank's run.
    std::vector<float> back(values.size(), NAN);
    reader.read(piece, back.data());
    EXPECT_EQ(back, values) << piece.name;
    const auto [first, last] = uneven_run(values.size(), size, (rank + 1) % size);
    std::vector<float> run(last - first, NAN);
    reader.read(piece, ElementRange{first, last - first}, run.empty() ? nullptr : run.data());
    EXPECT_EQ(run, std::vector<float>(values.begin() + first, values.begin() + last)) << piece.name;
    // The stored checksum is the sum of the ranks' runs; computed here from the piece whole, and
    // from runs cut another way, it is the same.
    const std::optional<std::uint64_t> stored = reader.checksum(piece.name);
    ASSERT_TRUE(stored.has_value()) << piece.name;
    EXPECT_EQ(*stored, partial_checksum(piece, ElementRange{0, values.size()}, values.data())) << piece.name;
    std::uint64_t by_halves = 0;
    const std::uint64_t half = values.size() / 2 + 1;
    by_halves += partial_checksum(piece, ElementRange{0, half}, values.data());
    by_halves += partial_checksum(piece, ElementRange{half, values.size() - half}, values.data() + half);
    EXPECT_EQ(*stored, by_halves) << piece.name;
  }
  // The whole of x is the cyclic piece written above; its checksum is that of the whole tensor.
  std::vector<float> all(A * B * D);
  reader.read(TensorSlab::whole("/model/x", {A, B, D}), all.data());
  EXPECT_EQ(reader.checksum("/model/x"), tensor_checksum(all.data(), all.size()));
  all[17] += 1.0f;
  EXPECT_NE(reader.checksum("/model/x"), tensor_checksum(all.data(), all.size()));
  EXPECT_EQ(reader.string_attribute("checksum_algorithm"), std::string(checksum_algorithm));
}

}  // namespace checkpoint_file_test
}  // namespace meshtrain::io::test
