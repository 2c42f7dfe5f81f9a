// io/safetensors_writer.hpp's write_hf_weights, read by an independent reader
// (tests/io/safetensors_reference.py check-written: the format's definition, BF16 rounded by torch,
// the sharding rule recomputed): single files and shards with their index, F32 bitwise and BF16
// rounded to nearest even, ties, overflow and specials included. Then writes that fail — a tensor
// whose producer throws, a file size limit, a full or read-only tmpfs — leave no file behind and
// an earlier export intact.
#include "core/half_types.hpp"
#include "io/hf_weights_reader.hpp"
#include "io/safetensors_writer.hpp"
#include "io_test_util.hpp"
#include "safetensors_test_util.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace meshtrain::io::test {
namespace safetensors_write_test {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Values with what BF16 rounding must get right: exact ties (1 + 2^-8 goes down to 1, 1 + 3·2^-8 up
// to 1 + 2^-6), FLT_MAX (to +Inf), float subnormals, signed zero, infinities, NaN.
std::vector<float> values(std::size_t n, float scale) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {
      1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, std::numeric_limits<float>::max(), 1e-40f, -0.0f, inf, -inf,
      std::nanf(""),  -1.0f - 0x1p-8f};
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * static_cast<float>(i) + 0.1f);
  for (std::size_t i = 0; i < special.size() && i < n; ++i) v[(i * 5) % n] = special[i];
  return v;
}

std::vector<NamedTensor> model_tensors() {
  return {{"model.embed_tokens.weight", {8, 5}, values(40, 3.0f)},
          {"model.norm.weight", {5}, values(5, 1.0f)},
          {"scalar", {}, {2.5f}},
          {"empty", {0, 4}, {}}};
}

// Sizes chosen against the limits below: F32 at 100 bytes gives [t0 t1] [t2] [t3] [t4] (t3 alone
// is larger than a shard); BF16 at 64 bytes gives [t0 t1 t2] [t3] [t4].
std::vector<NamedTensor> shard_tensors() {
  return {{"t0", {4, 4}, values(16, 2.0f)},
          {"t1", {6}, values(6, 0.5f)},
          {"t2", {5}, values(5, 8.0f)},
          {"t3", {40}, values(40, 1e3f)},
          {"t4", {2}, values(2, 1.0f)}};
}

// Producers that copy from `tensors`, which must outlive the write.
std::vector<TensorSource> sources(const std::vector<NamedTensor>& tensors) {
  std::vector<TensorSource> out;
  for (const NamedTensor& t : tensors) {
    out.push_back(
        {t.name, t.shape, [&t](std::span<float> v) { std::copy(t.values.begin(), t.values.end(), v.begin()); }});
  }
  return out;
}

json expectation(const std::string& dir, SafetensorsDtype dtype, std::uint64_t max_bytes,
                 const std::vector<NamedTensor>& tensors, int shards) {
  json c = {{"dir", dir},
            {"dtype", dtype_name(dtype)},
            {"max_shard_bytes", max_bytes},
            {"tensors", json::array()},
            {"expected_shards", shards},
            {"metadata", {{"source", "test"}}}};
  for (const NamedTensor& t : tensors) {
    std::vector<std::uint32_t> bits(t.values.size());
    if (!bits.empty())
      std::memcpy(bits.data(), t.values.data(), 4 * bits.size());  // an empty tensor's data() may be null
    c["tensors"].push_back({{"name", t.name}, {"shape", t.shape}, {"bits", bits}});
  }
  return c;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(SafetensorsWrite, AnIndependentReaderReadsEveryFileAndIndex) {
  LocalDir root;
  struct Case {
    std::string dir;
    SafetensorsDtype dtype;
    std::uint64_t max_bytes;
    std::vector<NamedTensor> tensors;
    int shards;
  };
  const std::vector<Case> cases = {
      {"f32_single", SafetensorsDtype::f32, 5'000'000'000, model_tensors(), 1},
      {"bf16_single", SafetensorsDtype::bf16, 5'000'000'000, model_tensors(), 1},
      {"f32_sharded", SafetensorsDtype::f32, 100, shard_tensors(), 4},
      {"bf16_sharded", SafetensorsDtype::bf16, 64, shard_tensors(), 3},
  };
  json expected = {{"cases", json::array()}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dir);
    const std::string dir = root / c.dir;
    fs::create_directory(dir);
    const HfWeightsOptions options{c.dtype, c.max_bytes, {{"source", "test"}}};
    const std::vector<TensorSource> in = sources(c.tensors);
    const std::vector<std::string> names = hf_weights_file_names(in, options);
    const std::vector<std::string> written = write_hf_weights(dir, in, options);
    ASSERT_EQ(written.size(), names.size());
    for (std::size_t i = 0; i < names.size(); ++i) EXPECT_EQ(written[i], dir + "/" + names[i]);
    EXPECT_EQ(names.size(), c.shards == 1 ? 1u : std::size_t(c.shards) + 1);
    expected["cases"].push_back(expectation(c.dir, c.dtype, c.max_bytes, c.tensors, c.shards));

    // meshtrain's own reader gives back the values, rounded once to BF16 where written so.
    HfWeightsReader back(dir);
    for (const NamedTensor& t : c.tensors) {
      std::vector<float> v(t.values.size());
      back.read(t.name, std::span<float>(v));
      for (std::size_t i = 0; i < v.size(); ++i) {
        const float want = c.dtype == SafetensorsDtype::f32 ? t.values[i] : float(bf16(t.values[i]));
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(v[i]));
        } else {
          EXPECT_EQ(bits(v[i]), bits(want)) << t.name << "[" << i << "]";
        }
      }
    }
  }
  // An export over an earlier, sharded one replaces its weight files and nothing else.
  const std::string again = root / "f32_sharded_then_single";
  fs::create_directory(again);
  write_hf_weights(again, sources(shard_tensors()), {SafetensorsDtype::f32, 100, {}});
  write_text(again + "/config.json", "{}");
  write_hf_weights(again, sources(model_tensors()), {SafetensorsDtype::f32, 5'000'000'000, {{"source", "test"}}});
  json c = expectation("f32_sharded_then_single", SafetensorsDtype::f32, 5'000'000'000, model_tensors(), 1);
  c["other_files"] = {"config.json"};
  expected["cases"].push_back(c);

  write_text(root / "expected.json", expected.dump());
  EXPECT_EQ(run_reference("check-written", root.path()), 0) << "the independent reader found problems (above)";
}

// Every file in `dir` by name, with its bytes.
std::map<std::string, std::string> contents(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const std::string& name : files_in(dir)) out[name] = read_text(dir + "/" + name);
  return out;
}

TEST(FailedWrite, AProducerThatThrowsLeavesTheEarlierExport) {
  LocalDir dir;
  write_hf_weights(dir.path(), sources(model_tensors()), {});
  const auto before = contents(dir.path());
  ASSERT_EQ(before.size(), 1u);
  const std::vector<NamedTensor> tensors = shard_tensors();  // the sources' producers read it: kept alive
  std::vector<TensorSource> in = sources(tensors);
  in[3].fill = [](std::span<float>) { throw std::runtime_error("checkpoint read failed"); };
  EXPECT_THROW(write_hf_weights(dir.path(), in, {SafetensorsDtype::f32, 100, {}}), std::runtime_error);
  EXPECT_EQ(contents(dir.path()), before);
}

// A process file size limit makes the third shard's write fail (EFBIG) as a full disk would.
TEST(FailedWrite, AWriteThatFailsMidwayLeavesNothing) {
  LocalDir dir;
  // The limit: below the third shard (t3, the largest), above the first two.
  const std::string probe = dir / "probe";
  fs::create_directory(probe);
  const auto sizes = write_hf_weights(probe, sources(shard_tensors()), {SafetensorsDtype::f32, 100, {}});
  const std::uintmax_t limit = fs::file_size(sizes[2]) - 1;
  ASSERT_LT(fs::file_size(sizes[0]), limit);
  ASSERT_LT(fs::file_size(sizes[1]), limit);
  fs::remove_all(probe);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);  // the write then fails instead of killing the test
  rlimit small = old;
  small.rlim_cur = limit;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    write_hf_weights(dir.path(), sources(shard_tensors()), {SafetensorsDtype::f32, 100, {}});
  } catch (const InputError& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find(dir / "model-00003-of-00004.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("write failed"), std::string::npos) << message;
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{});
}

// Real full and read-only file systems (tmpfs; needs root, skipped otherwise).
class Tmpfs {
 public:
  Tmpfs(const std::string& path, const std::string& options) : path_(path) {
    fs::create_directory(path);
    const std::string command = "mount -t tmpfs -o " + options + " tmpfs '" + path + "' >/dev/null 2>&1";
    mounted_ = ::geteuid() == 0 && std::system(command.c_str()) == 0;
  }
  ~Tmpfs() {
    if (mounted_) std::system(("umount -l '" + path_ + "' >/dev/null 2>&1").c_str());
  }
  bool mounted() const { return mounted_; }

 private:
  std::string path_;
  bool mounted_ = false;
};

TEST(FailedWrite, AFullOrReadOnlyFileSystemLeavesNothing) {
  LocalDir dir;
  const std::string full = dir / "full";
  {
    Tmpfs mount(full, "size=64k");
    if (!mount.mounted()) GTEST_SKIP() << "cannot mount a tmpfs (not root?)";
    // 40 tensors of 4 KiB in shards of 16 KiB: the disk fills in the fourth or fifth shard.
    std::vector<NamedTensor> big;
    for (int i = 0; i < 40; ++i) big.push_back({fmt::format("w{}", i), {1024}, values(1024, 1.0f)});
    write_text(full + "/config.json", "{}");
    expect_input_error(
        [&] {
          write_hf_weights(full, sources(big), {SafetensorsDtype::f32, 16 << 10, {}});
        },
        {full + "/model-000", "No space left on device"});
    EXPECT_EQ(files_in(full), std::vector<std::string>{"config.json"});
  }
  const std::string read_only = dir / "ro";
  Tmpfs mount(read_only, "size=64k,ro");
  ASSERT_TRUE(mount.mounted());
  expect_input_error([&] { write_hf_weights(read_only, sources(model_tensors()), {}); },
                     {read_only + "/model.safetensors", "Read-only file system"});
  EXPECT_EQ(files_in(read_only), std::vector<std::string>{});
}

TEST(SafetensorsWrite, WrongUseIsAProgrammingError) {
  LocalDir dir;
  std::vector<NamedTensor> twice = {{"a", {1}, {1.0f}}, {"a", {1}, {2.0f}}};
  EXPECT_THROW(write_hf_weights(dir.path(), sources(twice), {}), std::invalid_argument);
  EXPECT_THROW(write_hf_weights(dir.path(), sources(model_tensors()), {SafetensorsDtype::f16, 100, {}}),
               std::invalid_argument);
  EXPECT_THROW(write_hf_weights(dir.path(), sources(model_tensors()), {SafetensorsDtype::f32, 0, {}}),
               std::invalid_argument);
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{});
}

}  // namespace safetensors_write_test
}  // namespace meshtrain::io::test
