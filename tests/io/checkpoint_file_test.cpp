// Parallel HDF5 checkpoints, run at 1, 2 and 4 ranks: each rank writes its own block (one holds
// nothing), every rank reads the tensors back whole and in another partition, and the values are
// compared with a closed form computed here. h5py writes files we read and reads files we write.
#include "io/checkpoint_file.hpp"

#include "io_test_util.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef MESHTRAIN_PYTHON
#error "MESHTRAIN_PYTHON must name a python3 with h5py and numpy"
#endif

namespace meshtrain::io::test {
namespace {

namespace fs = std::filesystem;
using Shape = std::vector<std::uint64_t>;

// Closed forms for the tensors' elements (exact in float32).
float value2(std::uint64_t i, std::uint64_t j) { return static_cast<float>(i) * 100.0f + static_cast<float>(j) * 0.5f + 0.25f; }
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
      for (std::uint64_t d = 0; d < s.extent[2]; ++d) v.push_back(value3(s.offset[0] + a, s.offset[1] + b, s.offset[2] + d));
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

constexpr std::uint64_t R = 9, C = 5;                  // "/model/w": rows split
constexpr std::uint64_t A = 3, B = 8, D = 4;           // "/model/blocks.0.x": middle dimension split
constexpr std::uint64_t N = 13;                        // "/optim/exp_avg/bias": element ranges

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
    writer.set_attribute("step", 5);                              // int: through the integral template
    writer.set_attribute("step", std::int64_t{-(1ll << 40)});     // replaces it
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
  EXPECT_EQ(reader.attribute_names(), (std::vector<std::string>{"config", "empty", "step", "third", "tiny", "tokens"}));
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
      [&] { reader.read(TensorSlab::whole(name, {4, 4}), out.data()); }, {path});
  EXPECT_EQ(message, path + ": /model/h.0.attn.c_attn.weight has shape [4,12], expected [4,4]");
  expect_input_error([&] { reader.read(TensorSlab::whole(name, {48}), out.data()); }, {"[4,12]", "[48]"});
  expect_input_error([&] { reader.read(TensorSlab::whole("/model/wte.weight", {4, 12}), out.data()); },
                     {path, "/model/wte.weight"});
  expect_input_error([&] { reader.shape("/model/wpe.weight"); }, {path, "/model/wpe.weight"});
  // The right shape reads the ones written by rank 0.
  reader.read(TensorSlab::whole(name, {4, 12}), out.data());
  EXPECT_EQ(out, std::vector<float>(48, 1.0f));
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
  expect_input_error([&] { CheckpointReader r(dir / "missing.h5", MPI_COMM_WORLD); }, {dir / "missing.h5", "no such file"});
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

}  // namespace
}  // namespace meshtrain::io::test
