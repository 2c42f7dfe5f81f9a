// The GPT-2 parameter layout and the binding of named views into flat buffers.
#include "model/parameters.hpp"

#include "core/errors.hpp"

#include <fmt/format.h>

namespace meshtrain {

ParameterLayout::ParameterLayout(const ModelConfig& model) : model_(model) {
  const std::uint64_t C = model.d_model;
  add("wte.weight", {std::uint64_t(model.vocab), C}, InitKind::normal);
  add("wpe.weight", {std::uint64_t(model.seq_len), C}, InitKind::normal);
  for (int l = 0; l < model.layers; ++l) {
    const std::string h = fmt::format("h.{}.", l);
    add(h + "ln_1.weight", {C}, InitKind::ones);
    add(h + "ln_1.bias", {C}, InitKind::zeros);
    add(h + "attn.c_attn.weight", {C, 3 * C}, InitKind::normal);
    add(h + "attn.c_attn.bias", {3 * C}, InitKind::zeros);
    add(h + "attn.c_proj.weight", {C, C}, InitKind::normal_residual);
    add(h + "attn.c_proj.bias", {C}, InitKind::zeros);
    add(h + "ln_2.weight", {C}, InitKind::ones);
    add(h + "ln_2.bias", {C}, InitKind::zeros);
    add(h + "mlp.c_fc.weight", {C, 4 * C}, InitKind::normal);
    add(h + "mlp.c_fc.bias", {4 * C}, InitKind::zeros);
    add(h + "mlp.c_proj.weight", {4 * C, C}, InitKind::normal_residual);
    add(h + "mlp.c_proj.bias", {C}, InitKind::zeros);
  }
  add("ln_f.weight", {C}, InitKind::ones);
  add("ln_f.bias", {C}, InitKind::zeros);
}

void ParameterLayout::add(std::string name, std::vector<std::uint64_t> shape, InitKind init) {
  TensorInfo t;
  t.name = std::move(name);
  t.numel = 1;
  for (auto d : shape) t.numel *= d;
  t.shape = std::move(shape);
  t.offset = total_;
  t.init = init;
  t.decays = t.shape.size() >= 2;
  total_ += t.numel;
  tensors_.push_back(std::move(t));
}

const TensorInfo& ParameterLayout::find(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return t;
  }
  throw std::out_of_range("no parameter named " + name);
}

template <class Real>
ParameterTensors<Real> ParameterTensors<Real>::bind(Vec<Real> flat, const ParameterLayout& layout) {
  if (flat.extent(0) < layout.total()) {
    throw std::logic_error(fmt::format("flat buffer of {} elements cannot hold {} parameters", flat.extent(0),
                                       layout.total()));
  }
  // The layout lists tensors in the order the fields are declared; walk it once.
  const auto& ts = layout.tensors();
  std::size_t next = 0;
  auto take = [&](const char* expected_suffix) {
    const TensorInfo& t = ts.at(next++);
    if (t.name.find(expected_suffix) == std::string::npos) {
      throw std::logic_error("parameter layout out of order at " + t.name);
    }
    return slice(flat, t.offset, t.numel);
  };
  ParameterTensors p;
  p.wte = take("wte.weight");
  p.wpe = take("wpe.weight");
  p.blocks.resize(layout.model().layers);
  for (auto& b : p.blocks) {
    b.ln1_w = take("ln_1.weight");
    b.ln1_b = take("ln_1.bias");
    b.qkv_w = take("c_attn.weight");
    b.qkv_b = take("c_attn.bias");
    b.attproj_w = take("attn.c_proj.weight");
    b.attproj_b = take("attn.c_proj.bias");
    b.ln2_w = take("ln_2.weight");
    b.ln2_b = take("ln_2.bias");
    b.fc_w = take("c_fc.weight");
    b.fc_b = take("c_fc.bias");
    b.fcproj_w = take("mlp.c_proj.weight");
    b.fcproj_b = take("mlp.c_proj.bias");
  }
  p.lnf_w = take("ln_f.weight");
  p.lnf_b = take("ln_f.bias");
  return p;
}

template struct ParameterTensors<float>;
template struct ParameterTensors<double>;

double flops_per_token(const ParameterLayout& layout) {
  const auto& m = layout.model();
  return 6.0 * double(layout.total()) + 6.0 * m.layers * double(m.d_model) * m.seq_len;
}

}  // namespace meshtrain
