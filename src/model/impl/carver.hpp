// Carving one flat buffer into a model's activation views: the carving code runs once to count and
// once over the allocated buffer, so the counts and the views cannot disagree. Internal to model/.
#pragma once

#include "core/config.hpp"
#include "core/exec.hpp"

#include <algorithm>
#include <functional>
#include <string>

namespace meshtrain::carving {

// Hands out consecutive views of one flat buffer. Run once without a base to count the elements,
// then again over the allocated buffer: both passes make the same calls, so the offsets agree.
template <class Real>
class Carver {
 public:
  explicit Carver(Real* base) : base_(base) {}
  Vec<Real> take(std::size_t count) {
    Vec<Real> view(base_ == nullptr ? nullptr : base_ + used_, base_ == nullptr ? 0 : count);
    used_ += count;
    return view;
  }
  // A view of another element type T (per-row statistics in accum_t<Real>, the routers' indices),
  // aligned for T: a T larger than Real starts at a multiple of its size, a smaller one takes whole
  // elements of Real.
  template <class T>
  Vec<T> take_as(std::size_t count) {
    static_assert(sizeof(T) % sizeof(Real) == 0 || sizeof(Real) % sizeof(T) == 0);
    if constexpr (sizeof(T) >= sizeof(Real)) {
      constexpr std::size_t ratio = sizeof(T) / sizeof(Real);
      used_ = (used_ + ratio - 1) / ratio * ratio;
      Vec<Real> raw = take(count * ratio);
      return Vec<T>(reinterpret_cast<T*>(raw.data()), raw.extent(0) / ratio);
    } else {
      constexpr std::size_t per_real = sizeof(Real) / sizeof(T);
      Vec<Real> raw = take((count + per_real - 1) / per_real);
      return Vec<T>(reinterpret_cast<T*>(raw.data()), raw.data() == nullptr ? 0 : count);
    }
  }
  // A view from the buffer where `taken`, else `other` (a view of another set: recomputation's
  // shared block set).
  Vec<Real> take_if(bool taken, std::size_t count, const Vec<Real>& other) { return taken ? take(count) : other; }
  template <class T>
  Vec<T> take_as_if(bool taken, std::size_t count, const Vec<T>& other) {
    return taken ? take_as<T>(count) : other;
  }
  // Carves `one`, then `other` from where `one` began: their views share elements, so they may never be
  // live at once (each use says why). The carver moves on by the larger of the two.
  template <class One, class Other>
  void overlay(One&& one, Other&& other) {
    const std::size_t start = used_;
    one(*this);
    const std::size_t end_of_one = used_;
    used_ = start;
    other(*this);
    used_ = std::max(used_, end_of_one);
  }
  std::size_t used() const { return used_; }

 private:
  Real* base_;
  std::size_t used_ = 0;
};

// A carve of some views from a carver (Carver::overlay's second part, passed through a family's scratch).
template <class Real>
using CarveFn = std::function<void(Carver<Real>&)>;

// Which fields of a block's activations a carve takes from the buffer; the others are views of
// another set (or empty).
struct BlockFields {
  bool att;     // the attention probabilities
  bool rest;    // everything else backward reads
  bool output;  // residual3: the next block's input, or the stage's output
};

// What each micro-batch keeps of a block under `recompute`, and what the one shared set holds.
inline BlockFields kept_fields(Recompute r) { return {r == Recompute::none, r != Recompute::full, true}; }
inline BlockFields shared_fields(Recompute r) { return {r != Recompute::none, r == Recompute::full, false}; }

// Allocates a buffer exactly as large as `carve` needs and carves it.
template <class Real, class Tensors, class CarveFn>
Tensors allocate_and_carve(Buffer<Real>& buffer, const char* label, CarveFn carve) {
  Carver<Real> counter(nullptr);
  carve(counter);
  buffer = Buffer<Real>(std::string(label), counter.used());
  Carver<Real> carver(buffer.data());
  return carve(carver);
}

}  // namespace meshtrain::carving
