// Elementwise precision conversions for the mixed-precision trainer (train.precision bf16 | fp16):
// fp32 master weights → 16-bit working weights, 16-bit gradients → fp32, and the overflow check of
// dynamic loss scaling.
//
// Sizes: n elements.
//   convert:          out[i] = To(in[i])                  (rounded to nearest even when narrowing)
//   accumulate_into:  acc[i] += scale · in[i]             (in accum precision, rounded once into acc)
//   move_into:        acc[i] += scale · in[i]; in[i] = 0  (the same sum, and in emptied, in one pass)
//   count_nonfinite:  #{i : in[i] is ±Inf or NaN}
#pragma once

#include "core/exec.hpp"

#include <type_traits>

namespace meshtrain {

// One element of `convert`: same type or widening is a cast (double → float rounds); narrowing to
// 16 bits rounds from float or double directly, and from the other 16-bit type through its exact
// float value. A function of its own because nvcc refuses a device lambda that first uses a
// captured view inside `if constexpr`.
template <class To, class From>
KOKKOS_INLINE_FUNCTION To converted(From x) {
  if constexpr (std::is_same_v<To, From> || !is_low_precision_v<To>) {
    return static_cast<To>(x);
  } else if constexpr (is_low_precision_v<From>) {
    return To(float(x));
  } else {
    return To(x);
  }
}

// out and in may not overlap (unless To and From are the same type and they are the same memory).
template <class To, class From>
void convert(const ExecSpace& space, Vec<To> out, CVec<std::type_identity_t<From>> in, long n) {
  static_assert(reachable_v<Vec<To>> && reachable_v<CVec<From>>);
  Kokkos::parallel_for(
      "meshtrain::convert", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
      KOKKOS_LAMBDA(long i) { out(i) = converted<To, From>(in(i)); });
}

// acc += scale · in, e.g. fp32 gradients += (1 / loss_scale) · fp16 gradients, so that
// micro-batches accumulate in fp32 and the 16-bit gradient buffer can be zeroed for the next one.
// The product and sum are computed in Acc (float or double), rounded once.
template <class Acc, class From>
void accumulate_into(const ExecSpace& space, Vec<Acc> acc, CVec<std::type_identity_t<From>> in,
                     std::type_identity_t<Acc> scale, long n) {
  static_assert(reachable_v<Vec<Acc>> && reachable_v<CVec<From>> && !is_low_precision_v<Acc>);
  Kokkos::parallel_for(
      "meshtrain::accumulate_into", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
      KOKKOS_LAMBDA(long i) { acc(i) += scale * static_cast<Acc>(accum_t<From>(in(i))); });
}

// accumulate_into and a fill of `in` with zeros in one kernel: the 16-bit gradients handed to the
// fp32 ones (state/working_copy.hpp), bitwise as the two, over any number of tensors end to end.
template <class Acc, class From>
void move_into(const ExecSpace& space, Vec<Acc> acc, Vec<std::type_identity_t<From>> in,
               std::type_identity_t<Acc> scale, long n) {
  static_assert(reachable_v<Vec<Acc>> && reachable_v<Vec<From>> && !is_low_precision_v<Acc>);
  Kokkos::parallel_for(
      "meshtrain::move_into", Kokkos::RangePolicy<ExecSpace>(space, 0, n), KOKKOS_LAMBDA(long i) {
        acc(i) += scale * static_cast<Acc>(accum_t<From>(in(i)));
        in(i) = From(0.0f);
      });
}

// How many elements are ±Inf or NaN (a 16-bit overflow under loss scaling shows here). Tested on
// the exponent bits of the widened value (16-bit types widen exactly, Inf to Inf, NaN to NaN), so
// no compiler flag can fold the test away.
template <class Real>
long count_nonfinite(const ExecSpace& space, CVec<Real> x, long n) {
  static_assert(reachable_v<CVec<Real>>);
  long count = 0;
  Kokkos::parallel_reduce(
      "meshtrain::count_nonfinite", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
      KOKKOS_LAMBDA(long i, long& acc) {
        const accum_t<Real> v = x(i);
        if constexpr (std::is_same_v<accum_t<Real>, float>) {
          if ((half_detail::bits_of(v) & 0x7f800000u) == 0x7f800000u) ++acc;
        } else {
          if ((half_detail::bits_of(v) & 0x7ff0000000000000ull) == 0x7ff0000000000000ull) ++acc;
        }
      },
      count);
  return count;
}

template <class Real>
long count_nonfinite(const ExecSpace& space, Vec<Real> x, long n) {
  return count_nonfinite<Real>(space, CVec<Real>(x), n);
}

}  // namespace meshtrain
