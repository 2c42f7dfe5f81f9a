// Each model family against an independent PyTorch implementation (tests/oracle/make_reference.py,
// one reference file per case, the family in its `arch` attribute): the same weights and batch must
// give torch's logits, loss and every gradient, in double; a mixture of experts also torch's routing
// counts and aux and z losses (share/docs/usage.md, Mixture of experts), its gradients those of the
// whole objective. Read with the plain HDF5 C API, so that meshtrain's own io/ is not part of what is
// checked.
#include "model/language_model.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace meshtrain {
namespace {

class Hdf5File {
 public:
  explicit Hdf5File(const std::string& path) : id_(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)) {}
  ~Hdf5File() {
    if (id_ >= 0) H5Fclose(id_);
  }
  bool ok() const { return id_ >= 0; }

  template <class T>
  std::vector<T> read(const std::string& name, hid_t type) const {
    const hid_t ds = H5Dopen2(id_, name.c_str(), H5P_DEFAULT);
    EXPECT_GE(ds, 0) << name;
    const hid_t space = H5Dget_space(ds);
    std::vector<T> out(H5Sget_simple_extent_npoints(space));
    EXPECT_GE(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), 0) << name;
    H5Sclose(space);
    H5Dclose(ds);
    return out;
  }
  // Links (datasets, groups) in group `name`.
  std::size_t members(const char* name) const {
    H5G_info_t info{};
    EXPECT_GE(H5Gget_info_by_name(id_, name, &info, H5P_DEFAULT), 0) << name;
    return std::size_t(info.nlinks);
  }
  bool has_attribute(const char* name) const { return H5Aexists(id_, name) > 0; }
  bool has_link(const char* name) const { return H5Lexists(id_, name, H5P_DEFAULT) > 0; }
  long attribute(const char* name) const { return scalar<long>(name, H5T_NATIVE_LONG); }
  double real_attribute(const char* name) const { return scalar<double>(name, H5T_NATIVE_DOUBLE); }
  // A variable-length string attribute, as h5py writes a str.
  std::string text_attribute(const char* name) const {
    const hid_t a = H5Aopen(id_, name, H5P_DEFAULT);
    EXPECT_GE(a, 0) << name;
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    char* text = nullptr;
    EXPECT_GE(H5Aread(a, type, &text), 0) << name;
    std::string out = text != nullptr ? text : "";
    H5free_memory(text);
    H5Tclose(type);
    H5Aclose(a);
    return out;
  }

 private:
  template <class T>
  T scalar(const char* name, hid_t type) const {
    T value{};
    const hid_t a = H5Aopen(id_, name, H5P_DEFAULT);
    EXPECT_GE(a, 0) << name;
    EXPECT_GE(H5Aread(a, type, &value), 0) << name;
    H5Aclose(a);
    return value;
  }

  hid_t id_;
};

double relative_error(double got, double want) { return std::fabs(got - want) / std::max(1e-6, std::fabs(want)); }

// The shape the reference file was made for.
ModelConfig reference_model(const Hdf5File& ref) {
  ModelConfig m;
  m.layers = int(ref.attribute("layers"));
  m.heads = int(ref.attribute("heads"));
  m.d_model = int(ref.attribute("d_model"));
  m.vocab = int(ref.attribute("vocab"));
  m.seq_len = int(ref.attribute("seq_len"));
  const std::string arch = ref.text_attribute("arch");
  EXPECT_TRUE(arch == "gpt2" || arch == "llama") << "arch " << arch;
  if (arch == "llama") {
    m.arch = Arch::llama;
    m.kv_heads = int(ref.attribute("kv_heads"));
    m.ffn_hidden = int(ref.attribute("ffn_hidden"));
    m.multiple_of = int(ref.attribute("multiple_of"));
    m.rope_theta = ref.real_attribute("rope_theta");
    m.norm_eps = ref.real_attribute("norm_eps");
    m.tie_embeddings = ref.attribute("tie_embeddings") != 0;
    m.qkv_bias = ref.attribute("qkv_bias") != 0;
    m.head_dim = int(ref.attribute("head_dim"));
    const auto scaling = from_name<RopeScaling>(ref.text_attribute("rope_scaling"));
    EXPECT_TRUE(scaling.has_value()) << "rope_scaling " << ref.text_attribute("rope_scaling");
    m.rope_scaling = scaling.value_or(RopeScaling::none);
    m.rope_factor = ref.real_attribute("rope_factor");
    m.rope_low_freq_factor = ref.real_attribute("rope_low_freq_factor");
    m.rope_high_freq_factor = ref.real_attribute("rope_high_freq_factor");
    m.rope_original_max_position = int(ref.attribute("rope_original_max_position"));
  }
  if (ref.has_attribute("experts")) {  // a mixture of experts; absent: dense
    m.experts = int(ref.attribute("experts"));
    m.experts_per_token = int(ref.attribute("experts_per_token"));
    m.moe_every = int(ref.attribute("moe_every"));
    m.shared_experts = int(ref.attribute("shared_experts"));
    m.expert_hidden = int(ref.attribute("expert_hidden"));
    m.capacity_factor = ref.real_attribute("capacity_factor");
    m.normalize_gates = ref.attribute("normalize_gates") != 0;
    m.aux_loss_coef = ref.real_attribute("aux_loss_coef");
    m.z_loss_coef = ref.real_attribute("z_loss_coef");
  }
  return m;
}

// One forward pass's routing against torch's: the MoE blocks, the counts exactly, the losses to 1e-10.
void expect_router_statistics(const Hdf5File& ref, const RouterStatistics& got) {
  const auto blocks = ref.read<long>("/expected/moe/blocks", H5T_NATIVE_LONG);
  const auto routed = ref.read<long>("/expected/moe/routed", H5T_NATIVE_LONG);
  const auto kept = ref.read<long>("/expected/moe/kept", H5T_NATIVE_LONG);
  const auto aux = ref.read<double>("/expected/moe/aux", H5T_NATIVE_DOUBLE);
  const auto z = ref.read<double>("/expected/moe/z", H5T_NATIVE_DOUBLE);
  EXPECT_EQ(got.passes, 1);
  ASSERT_EQ(got.blocks, std::vector<int>(blocks.begin(), blocks.end()));
  const int E = int(ref.attribute("experts"));
  ASSERT_EQ(got.experts, E);
  ASSERT_EQ(got.routed.size(), routed.size());
  ASSERT_EQ(got.kept.size(), kept.size());
  ASSERT_EQ(got.aux_loss.size(), blocks.size());
  ASSERT_EQ(got.z_loss.size(), blocks.size());
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    for (int e = 0; e < E; ++e) {
      const std::size_t i = b * std::size_t(E) + std::size_t(e);
      EXPECT_EQ(got.routed_at(b, e), double(routed[i])) << "block " << blocks[b] << " expert " << e << " routed";
      EXPECT_EQ(got.kept_at(b, e), double(kept[i])) << "block " << blocks[b] << " expert " << e << " kept";
    }
    EXPECT_LT(relative_error(got.aux_loss[b], aux[b]), 1e-10)
        << "block " << blocks[b] << " aux " << got.aux_loss[b] << " vs torch " << aux[b];
    EXPECT_LT(relative_error(got.z_loss[b], z[b]), 1e-10)
        << "block " << blocks[b] << " z " << got.z_loss[b] << " vs torch " << z[b];
  }
}

// MESHTRAIN_TORCH_REFERENCES: the reference files, comma-separated.
std::vector<std::string> reference_files() {
  std::vector<std::string> files;
  std::istringstream list(MESHTRAIN_TORCH_REFERENCES);
  for (std::string path; std::getline(list, path, ',');) files.push_back(path);
  return files;
}

// Each reference under each model.attention: torch's attention is the materialized one written out.
class ModelVsTorch : public ::testing::TestWithParam<std::tuple<std::string, AttentionKernel>> {};

TEST_P(ModelVsTorch, LossLogitsAndEveryGradient) {
  const auto& [path, attention] = GetParam();
  const Hdf5File ref(path);
  ASSERT_TRUE(ref.ok()) << "reference file missing: " << path;
  ModelConfig m = reference_model(ref);
  m.attention = attention;
  const int B = int(ref.attribute("batch")), N = B * m.seq_len;

  ExecSpace space;
  const auto family = make_language_model<double>(space, m, B);
  LanguageModel<double>& model = *family;
  auto w = Kokkos::create_mirror_view(model.weights());
  for (const TensorInfo& t : model.layout().tensors()) {
    const auto values = ref.read<double>("/model/" + t.name, H5T_NATIVE_DOUBLE);
    ASSERT_EQ(values.size(), t.numel) << t.name;
    std::copy(values.begin(), values.end(), w.data() + t.offset);
  }
  Kokkos::deep_copy(model.weights(), w);
  // Every tensor torch holds is one of the model's (no bias, no extra table meshtrain lacks).
  ASSERT_EQ(ref.members("/model"), model.layout().tensors().size());

  Buffer<int> inputs("inputs", N), targets("targets", N);
  const auto in = ref.read<int>("/inputs", H5T_NATIVE_INT);
  const auto tg = ref.read<int>("/targets", H5T_NATIVE_INT);
  Kokkos::deep_copy(inputs, Kokkos::View<const int*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(in.data(), N));
  Kokkos::deep_copy(targets,
                    Kokkos::View<const int*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(tg.data(), N));
  const CVec<int> din(inputs.data(), N), dtg(targets.data(), N);

  // Logits first (an inference forward leaves them unchanged).
  const auto logits_view = model.forward_logits(din);
  auto logits = Kokkos::create_mirror_view_and_copy(HostSpace(), logits_view);
  const auto want_logits = ref.read<double>("/expected/logits", H5T_NATIVE_DOUBLE);
  ASSERT_EQ(want_logits.size(), std::size_t(N) * m.vocab);
  for (std::size_t i = 0; i < want_logits.size(); ++i) {
    ASSERT_NEAR(logits(i), want_logits[i], 1e-9) << "logit " << i;
  }

  model.zero_grads();
  model.clear_router_statistics();
  const double loss = model.forward(din, dtg, 1.0 / N);
  if (ref.has_link("/expected/moe")) {
    expect_router_statistics(ref, model.router_statistics());
  } else {
    EXPECT_TRUE(model.router_statistics().empty());
  }
  model.backward(din);
  const double want_loss = ref.read<double>("/expected/loss", H5T_NATIVE_DOUBLE).at(0);
  EXPECT_LT(relative_error(loss, want_loss), 1e-10) << loss << " vs torch " << want_loss;

  auto grads = Kokkos::create_mirror_view_and_copy(HostSpace(), model.grads());
  for (const TensorInfo& t : model.layout().tensors()) {
    const auto want = ref.read<double>("/expected/grads/" + t.name, H5T_NATIVE_DOUBLE);
    ASSERT_EQ(want.size(), t.numel) << t.name;
    double max_abs = 0, max_diff = 0;
    for (std::size_t i = 0; i < t.numel; ++i) {
      max_abs = std::max(max_abs, std::fabs(want[i]));
      max_diff = std::max(max_diff, std::fabs(grads(t.offset + i) - want[i]));
    }
    EXPECT_GT(max_abs, 0.0) << t.name << ": torch's gradient is all zero, the case exercises nothing";
    EXPECT_LE(max_diff, 1e-9 * std::max(1.0, max_abs)) << t.name << " max |Δ| " << max_diff;
  }
}

// Each case is named by its file and attention, e.g.
// References/ModelVsTorch.LossLogitsAndEveryGradient/torch_reference_llama_mqa_fused.
std::string case_name(const ::testing::TestParamInfo<std::tuple<std::string, AttentionKernel>>& reference) {
  const auto& [path, attention] = reference.param;
  return std::filesystem::path(path).stem().string() + "_" + std::string(name_of(attention));
}

INSTANTIATE_TEST_SUITE_P(References, ModelVsTorch,
                         ::testing::Combine(::testing::ValuesIn(reference_files()),
                                            ::testing::Values(AttentionKernel::fused, AttentionKernel::materialized)),
                         case_name);

}  // namespace
}  // namespace meshtrain
