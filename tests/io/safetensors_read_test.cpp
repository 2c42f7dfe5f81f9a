// io/safetensors_file.hpp and io/hf_weights_reader.hpp against files an independent writer made
// (tests/io/safetensors_reference.py: numpy and torch, from the format's definition): every value
// read back exactly in F32, BF16 and F16, from single files, unaligned data and a sharded directory
// with its index; and every bad file and directory refused with an InputError naming the file and
// the tensor at fault.
#include "io/hf_weights_reader.hpp"
#include "io/safetensors_file.hpp"
#include "io_test_util.hpp"
#include "safetensors_test_util.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace meshtrain::io::test {
namespace safetensors_read_test {

using json = nlohmann::json;

// The written cases, made once for all tests of this file.
class ReferenceFiles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new LocalDir;
    ASSERT_EQ(run_reference("write-cases", dir_->path()), 0) << "the Python reference writer failed";
    cases_ = new json(json::parse(read_text(*dir_ / "cases.json")));
  }
  static void TearDownTestSuite() {
    delete cases_;
    delete dir_;
  }
  static std::string path(const json& c) { return *dir_ / c["path"].get<std::string>(); }
  static const json& cases(const char* kind) { return (*cases_)[kind]; }

 private:
  static LocalDir* dir_;
  static json* cases_;
};
LocalDir* ReferenceFiles::dir_ = nullptr;
json* ReferenceFiles::cases_ = nullptr;

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The tensors listed and read (as float and as double) equal the expectation exactly.
template <class Reader>
void expect_tensors(Reader& reader, const std::vector<SafetensorsTensor>& tensors, const json& expected) {
  std::vector<std::string> names, expected_names;
  for (const SafetensorsTensor& t : tensors) names.push_back(t.name);
  for (const auto& [name, e] : expected.items()) expected_names.push_back(name);
  EXPECT_EQ(names, expected_names);  // both sorted by name
  for (const SafetensorsTensor& t : tensors) {
    if (!expected.contains(t.name)) continue;
    SCOPED_TRACE(t.name);
    const json& e = expected[t.name];
    EXPECT_EQ(dtype_name(t.dtype), e["dtype"].get<std::string>());
    EXPECT_EQ(t.shape, e["shape"].get<std::vector<std::uint64_t>>());
    const auto want = e["bits"].get<std::vector<std::uint32_t>>();
    ASSERT_EQ(t.elements(), want.size());
    std::vector<float> f(want.size());
    std::vector<double> d(want.size());
    reader.read(t.name, std::span<float>(f));
    reader.read(t.name, std::span<double>(d));
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(bits(f[i]), want[i]) << "element " << i;
      float w;
      std::memcpy(&w, &want[i], 4);
      if (std::isnan(w)) {
        EXPECT_TRUE(std::isnan(d[i])) << "element " << i;
      } else {
        EXPECT_EQ(d[i], static_cast<double>(w)) << "element " << i;
        EXPECT_EQ(std::signbit(d[i]), std::signbit(w)) << "element " << i;
      }
    }
  }
}

// The InputError message `make` throws, every needle in it.
template <class F>
void expect_refusal(F make, const json& needles) {
  try {
    make();
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    const std::string message = e.what();
    for (const json& needle : needles) {
      EXPECT_NE(message.find(needle.get<std::string>()), std::string::npos)
          << "message lacks '" << needle.get<std::string>() << "':\n"
          << message;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got: " << e.what();
  }
}

TEST_F(ReferenceFiles, FilesReadExactlyInEveryDtype) {
  ASSERT_EQ(cases("good_files").size(), 3u);
  for (const json& c : cases("good_files")) {
    SCOPED_TRACE(path(c));
    SafetensorsFile file(path(c));
    expect_tensors(file, file.tensors(), c["tensors"]);
    EXPECT_EQ(file.metadata(), (c["metadata"].get<std::map<std::string, std::string>>()));
  }
}

TEST_F(ReferenceFiles, DirectoriesReadExactlyShardByShard) {
  ASSERT_EQ(cases("good_dirs").size(), 2u);
  for (const json& c : cases("good_dirs")) {
    SCOPED_TRACE(path(c));
    HfWeightsReader weights(path(c));
    expect_tensors(weights, weights.tensors(), c["tensors"]);
  }
  // Reading back and forth between shards maps each again; the values stay the same.
  HfWeightsReader sharded(path(cases("good_dirs")[1]));
  EXPECT_EQ(sharded.source(), path(cases("good_dirs")[1]) + "/model.safetensors.index.json");
  EXPECT_EQ(sharded.file_of("lm_head.weight"), path(cases("good_dirs")[1]) + "/model-00003-of-00003.safetensors");
  std::vector<float> a(40), b(40);
  sharded.read("lm_head.weight", std::span<float>(a));
  sharded.read("model.embed_tokens.weight", std::span<float>(b));
  sharded.read("lm_head.weight", std::span<float>(b));
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * a.size()), 0);  // bitwise: the values hold a NaN
  expect_refusal([&] { sharded.tensor("model.layers.9.absent"); },
                 json::array({"model.layers.9.absent", "model.safetensors.index.json"}));
  EXPECT_THROW(sharded.read("lm_head.weight", std::span<float>(a.data(), 39)), std::invalid_argument);
}

TEST_F(ReferenceFiles, EveryBadFileIsRefusedNamingFileAndTensor) {
  ASSERT_GE(cases("bad_files").size(), 20u);
  for (const json& c : cases("bad_files")) {
    SCOPED_TRACE(path(c));
    expect_refusal([&] { SafetensorsFile file(path(c)); }, c["needles"]);
  }
}

TEST_F(ReferenceFiles, EveryBadDirectoryIsRefusedNamingFileAndTensor) {
  ASSERT_GE(cases("bad_dirs").size(), 12u);
  for (const json& c : cases("bad_dirs")) {
    SCOPED_TRACE(path(c));
    expect_refusal([&] { HfWeightsReader weights(path(c)); }, c["needles"]);
  }
}

}  // namespace safetensors_read_test
}  // namespace meshtrain::io::test
