// AdamW (share/docs/usage.md, Model and optimizer) against a scalar reference written here from
// torch.optim.AdamW's documented formulas, against closed forms for the first step and a pure decay step, float against
// the double reference, and once against torch.optim.AdamW in float64.
#include "core/exec.hpp"
#include "optim/adamw.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace meshtrain {
namespace test_adamw {

using Host = std::vector<double>;

// ---------------------------------------------------------------------------------------------
// Device buffers.

template <class Real>
Buffer<Real> to_device(const Host& host) {
  Buffer<Real> buf("test_adamw::buffer", host.size());
  auto mirror = Kokkos::create_mirror_view(buf);
  for (std::size_t i = 0; i < host.size(); ++i) mirror(i) = static_cast<Real>(host[i]);
  Kokkos::deep_copy(buf, mirror);
  return buf;
}

template <class Real>
Host to_host(const Buffer<Real>& buf) {
  Kokkos::fence();
  auto mirror = Kokkos::create_mirror_view(buf);
  Kokkos::deep_copy(mirror, buf);
  Host host(buf.extent(0));
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<double>(mirror(i));
  return host;
}

template <class Real>
struct DeviceState {
  Buffer<Real> param, exp_avg, exp_avg_sq;
  explicit DeviceState(const Host& p)
      : param(to_device<Real>(p)),
        exp_avg(to_device<Real>(Host(p.size(), 0.0))),
        exp_avg_sq(to_device<Real>(Host(p.size(), 0.0))) {}

  void update(const Host& grad, const AdamWStep& step) {
    const auto g = to_device<Real>(grad);
    const std::size_t n = param.extent(0);
    adamw_update<Real>(ExecSpace(), Vec<Real>(param.data(), n), Vec<Real>(exp_avg.data(), n),
                       Vec<Real>(exp_avg_sq.data(), n), CVec<Real>(g.data(), n), n, step);
    Kokkos::fence();
  }
};

// ---------------------------------------------------------------------------------------------
// The reference: one element at a time, literally torch.optim.AdamW's documented formulas.

struct RefState {
  Host p, m, v;
  explicit RefState(const Host& p0) : p(p0), m(p0.size(), 0.0), v(p0.size(), 0.0) {}

  void update(const Host& grad, double lr, double wd, double beta1, double beta2, double eps, std::int64_t t,
              double grad_scale) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double g = grad[i] * grad_scale;
      p[i] = p[i] * (1.0 - lr * wd);
      m[i] = beta1 * m[i] + (1.0 - beta1) * g;
      v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
      const double m_hat = m[i] / (1.0 - std::pow(beta1, double(t)));
      const double v_hat = v[i] / (1.0 - std::pow(beta2, double(t)));
      p[i] = p[i] - lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

// Every element within rel·max(|want|, floor).
void expect_close(const Host& got, const Host& want, double rel, double floor, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = rel * std::max(std::fabs(want[i]), floor);
    EXPECT_LE(std::fabs(got[i] - want[i]), bound)
        << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << ", diff " << std::fabs(got[i] - want[i]);
  }
}

double max_abs(const Host& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// ---------------------------------------------------------------------------------------------
// The run every comparison shares: two tensors (one with decay, one without), 5 updates with
// varying gradients, learning rates and clip factors.

constexpr int kSteps = 5;
constexpr std::size_t kN = 9;
constexpr double kBeta1 = 0.9, kBeta2 = 0.95, kEps = 1e-8, kWeightDecay = 0.1;
const double kLr[kSteps] = {1e-2, 2e-2, 3e-2, 2.5e-2, 5e-3};
const double kScale[kSteps] = {0.37, 1.0, 0.5, 0.8125, 0.0625};

Host initial_params(int tensor) {
  Host p(kN);
  for (std::size_t i = 0; i < kN; ++i) p[i] = (tensor == 0 ? 0.75 : -0.4) + 0.173 * double(i) - 0.021 * double(i * i);
  return p;
}

Host gradient(int tensor, int step) {
  Host g(kN);
  for (std::size_t i = 0; i < kN; ++i)
    g[i] = std::sin(1.3 * double(i) + 0.7 * double(step) + 0.4 * double(tensor) + 0.1) * (1.0 + 0.5 * double(step));
  // Element 0: no gradient in the first two updates (m = v = 0, the update is 0 whatever eps).
  if (step < 2) g[0] = 0.0;
  // Element 1: gradients near eps, where eps matters.
  g[1] = (step % 2 == 0 ? 1.0 : -0.5) * 3e-9 * double(step + 1);
  // Element 2: a large gradient that flips sign.
  g[2] = (step % 2 == 0 ? 40.0 : -25.0);
  return g;
}

double decay_of(int tensor) { return tensor == 0 ? kWeightDecay : 0.0; }

RefState reference_run(int tensor) {
  RefState ref(initial_params(tensor));
  for (int s = 0; s < kSteps; ++s)
    ref.update(gradient(tensor, s), kLr[s], decay_of(tensor), kBeta1, kBeta2, kEps, s + 1, kScale[s]);
  return ref;
}

template <class Real>
DeviceState<Real> device_run(int tensor) {
  DeviceState<Real> state(initial_params(tensor));
  for (int s = 0; s < kSteps; ++s)
    state.update(gradient(tensor, s), AdamWStep{kLr[s], decay_of(tensor), kBeta1, kBeta2, kEps, s + 1, kScale[s]});
  return state;
}

// ---------------------------------------------------------------------------------------------

TEST(AdamW, FirstStepClosedForm) {
  // t = 1 without decay: m̂ = g, v̂ = g², so p ← p − lr·g/(|g| + eps); m = (1−β1)g, v = (1−β2)g².
  const Host p0 = {1.0, -2.0, 0.5, 3.0, 0.0};
  const Host g = {0.5, -4.0, 1e-8, 0.0, -2.0};
  const double lr = 0.01, scale = 0.5;
  DeviceState<double> state(p0);
  state.update(g, AdamWStep{lr, 0.0, 0.9, 0.999, 1e-8, 1, scale});
  Host want_p(p0.size()), want_m(p0.size()), want_v(p0.size());
  for (std::size_t i = 0; i < p0.size(); ++i) {
    const double gs = g[i] * scale;
    want_p[i] = p0[i] - lr * gs / (std::fabs(gs) + 1e-8);
    want_m[i] = 0.1 * gs;
    want_v[i] = 0.001 * gs * gs;
  }
  // Hand values: 1 − 0.01·0.25/(0.25 + 1e-8); −2 + 0.01·2/(2+1e-8); 0.5 − 0.01·(5e-9/1.5e-8) = 0.5 − 0.01/3.
  EXPECT_NEAR(want_p[0], 0.99000000040, 1e-10);
  EXPECT_NEAR(want_p[2], 0.5 - 0.01 / 3, 1e-12);
  expect_close(to_host(state.param), want_p, 1e-12, 1e-300, "param");
  expect_close(to_host(state.exp_avg), want_m, 1e-12, 1e-300, "exp_avg");
  expect_close(to_host(state.exp_avg_sq), want_v, 1e-12, 1e-300, "exp_avg_sq");
}

TEST(AdamW, ZeroGradientOnlyDecays) {
  // g = 0 with m = v = 0: p ← p·(1 − lr·wd) and nothing else. 2·(1 − 0.1·0.5) = 1.9.
  DeviceState<double> state(Host{2.0, -4.0, 0.0});
  state.update(Host{0.0, 0.0, 0.0}, AdamWStep{0.1, 0.5, 0.9, 0.95, 1e-8, 1, 0.7});
  expect_close(to_host(state.param), Host{1.9, -3.8, 0.0}, 1e-15, 1e-300, "decay only");
  DeviceState<double> plain(Host{2.0, -4.0, 0.0});
  plain.update(Host{0.0, 0.0, 0.0}, AdamWStep{0.1, 0.0, 0.9, 0.95, 1e-8, 1, 0.7});
  expect_close(to_host(plain.param), Host{2.0, -4.0, 0.0}, 0.0, 1e-300, "no decay, no gradient");
}

TEST(AdamW, DoubleMatchesScalarReferenceOverFiveSteps) {
  for (int tensor : {0, 1}) {
    const auto ref = reference_run(tensor);
    auto dev = device_run<double>(tensor);
    const std::string what = tensor == 0 ? "decay " : "no decay ";
    expect_close(to_host(dev.param), ref.p, 1e-12, 1e-300, what + "param");
    expect_close(to_host(dev.exp_avg), ref.m, 1e-12, 1e-300, what + "exp_avg");
    expect_close(to_host(dev.exp_avg_sq), ref.v, 1e-12, 1e-300, what + "exp_avg_sq");
  }
  // Decay must have made a difference: the two tensors' updates differ from a decay-free rerun.
  RefState no_decay(initial_params(0));
  for (int s = 0; s < kSteps; ++s) no_decay.update(gradient(0, s), kLr[s], 0.0, kBeta1, kBeta2, kEps, s + 1, kScale[s]);
  const auto with_decay = to_host(device_run<double>(0).param);
  double largest = 0;
  for (std::size_t i = 0; i < kN; ++i) largest = std::max(largest, std::fabs(with_decay[i] - no_decay.p[i]));
  EXPECT_GT(largest, 1e-4) << "weight decay had no visible effect";
}

TEST(AdamW, FloatMatchesDoubleReference) {
  for (int tensor : {0, 1}) {
    const auto ref = reference_run(tensor);
    auto dev = device_run<float>(tensor);
    const std::string what = tensor == 0 ? "float decay " : "float no decay ";
    expect_close(to_host(dev.param), ref.p, 1e-5, 1e-300, what + "param");
    // m and v can be small where gradients of opposite signs cancel: relative to the tensor's scale.
    expect_close(to_host(dev.exp_avg), ref.m, 1e-5, 1e-3 * max_abs(ref.m), what + "exp_avg");
    expect_close(to_host(dev.exp_avg_sq), ref.v, 1e-5, 1e-3 * max_abs(ref.v), what + "exp_avg_sq");
  }
}

// ---------------------------------------------------------------------------------------------
// torch.optim.AdamW in float64 on the same numbers.

std::string hex_list(const Host& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%a", v[i]);
    out += std::string(i ? ", " : "") + "h('" + buf + "')";
  }
  return out + "]";
}

std::string torch_script() {
  std::ostringstream s;
  s << "import sys\n"
       "try:\n"
       "    import torch\n"
       "except Exception:\n"
       "    print('NO_TORCH')\n"
       "    sys.exit(0)\n"
       "h = float.fromhex\n"
       "def t(x):\n"
       "    return torch.tensor(x, dtype=torch.float64)\n"
       "params = [torch.nn.Parameter(t("
    << hex_list(initial_params(0)) << ")), torch.nn.Parameter(t(" << hex_list(initial_params(1)) << "))]\n";
  s << "grads = [[";
  for (int tensor : {0, 1}) {
    s << (tensor ? "], [" : "");
    for (int step = 0; step < kSteps; ++step) s << (step ? ", " : "") << hex_list(gradient(tensor, step));
  }
  s << "]]\n";
  s << "lrs = " << hex_list(Host(kLr, kLr + kSteps)) << "\n";
  s << "scales = " << hex_list(Host(kScale, kScale + kSteps)) << "\n";
  s << "opt = torch.optim.AdamW([{'params': [params[0]], 'weight_decay': h('" <<
      [] {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%a", kWeightDecay);
        return std::string(buf);
      }()
    << "')}, {'params': [params[1]], 'weight_decay': 0.0}], lr=lrs[0], betas=(0.9, 0.95), eps=1e-8)\n";
  s << "for step in range(" << kSteps
    << "):\n"
       "    for group in opt.param_groups:\n"
       "        group['lr'] = lrs[step]\n"
       "    for k in range(2):\n"
       "        params[k].grad = t(grads[k][step]) * scales[step]\n"
       "    opt.step()\n"
       "def out(name, x):\n"
       "    print(name, ' '.join(float(v).hex() for v in x.detach().tolist()))\n"
       "for k in range(2):\n"
       "    out('param%d' % k, params[k])\n"
       "    out('exp_avg%d' % k, opt.state[params[k]]['exp_avg'])\n"
       "    out('exp_avg_sq%d' % k, opt.state[params[k]]['exp_avg_sq'])\n";
  return s.str();
}

TEST(AdamW, DoubleMatchesTorchAdamW) {
  const std::string path = ::testing::TempDir() + "meshtrain_adamw_" + std::to_string(::getpid()) + ".py";
  {
    std::ofstream f(path);
    f << torch_script();
  }
  const std::string command = std::string("\"") + MESHTRAIN_PYTHON + "\" \"" + path + "\" 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << command;
  std::string output;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) output += buf;
  const int status = ::pclose(pipe);
  std::remove(path.c_str());
  if (output.rfind("NO_TORCH", 0) == 0) GTEST_SKIP() << "torch is not importable by " << MESHTRAIN_PYTHON;
  ASSERT_EQ(status, 0) << command << "\n" << output;

  std::map<std::string, Host> torch;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string name, word;
    words >> name;
    Host values;
    while (words >> word) values.push_back(std::strtod(word.c_str(), nullptr));
    torch[name] = values;
  }
  for (int tensor : {0, 1}) {
    const auto k = std::to_string(tensor);
    ASSERT_EQ(torch["param" + k].size(), kN) << output;
    auto dev = device_run<double>(tensor);
    const std::string what = "torch tensor " + k + " ";
    expect_close(to_host(dev.param), torch["param" + k], 1e-12, 1e-300, what + "param");
    expect_close(to_host(dev.exp_avg), torch["exp_avg" + k], 1e-12, 1e-300, what + "exp_avg");
    expect_close(to_host(dev.exp_avg_sq), torch["exp_avg_sq" + k], 1e-12, 1e-300, what + "exp_avg_sq");
    // The test's own reference agrees with torch too.
    const auto ref = reference_run(tensor);
    expect_close(ref.p, torch["param" + k], 1e-12, 1e-300, what + "reference param");
  }
}

}  // namespace test_adamw
}  // namespace meshtrain
