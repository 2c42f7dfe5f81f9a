// Kokkos API differences between Debian's 3.4 (inside Trilinos) and the 4.x/5.x that clusters bring.
// Kernels call meshtrain::kmath::exp etc. and never name the Kokkos version themselves.
#pragma once

#include <Kokkos_Core.hpp>

#if KOKKOS_VERSION >= 40000
#define MESHTRAIN_KOKKOS_MATH Kokkos
#else
// 3.4 has the math functions only under Kokkos::Experimental.
#define MESHTRAIN_KOKKOS_MATH Kokkos::Experimental
#endif

namespace meshtrain::kmath {

using MESHTRAIN_KOKKOS_MATH::exp;
using MESHTRAIN_KOKKOS_MATH::fabs;
using MESHTRAIN_KOKKOS_MATH::log;
using MESHTRAIN_KOKKOS_MATH::sqrt;
using MESHTRAIN_KOKKOS_MATH::tanh;

}  // namespace meshtrain::kmath

#undef MESHTRAIN_KOKKOS_MATH

namespace meshtrain {

// Kokkos::initialize without its warnings about thread settings (3.7 replaced InitArguments).
inline void initialize_kokkos() {
#if KOKKOS_VERSION >= 30700
  Kokkos::initialize(Kokkos::InitializationSettings().set_disable_warnings(true));
#else
  Kokkos::InitArguments arguments;
  arguments.disable_warnings = true;
  Kokkos::initialize(arguments);
#endif
}

}  // namespace meshtrain
