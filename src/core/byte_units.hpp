#pragma once
// Binary byte units for the sizes meshtrain prints and plans in (as double: sizes are divided by them).

namespace meshtrain {

inline constexpr double MiB = 1024.0 * 1024.0;
inline constexpr double GiB = 1024.0 * MiB;

}  // namespace meshtrain
