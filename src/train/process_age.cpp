// Process age from /proc/self/stat's start time against the boot-time clock it counts from.
#include "train/process_age.hpp"

#include <fstream>
#include <sstream>
#include <string>

#include <time.h>
#include <unistd.h>

namespace meshtrain {

double process_age_s() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  if (!std::getline(in, stat)) return -1;
  // Field 2 (the command) is in parentheses and may hold spaces: count fields after the last ')'.
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int k = 3; k <= 21; ++k) fields >> field;  // state … itrealvalue
  unsigned long long start_ticks = 0;
  if (!(fields >> start_ticks)) return -1;  // field 22: start time, clock ticks after boot
  timespec now{};
  const long ticks_per_s = sysconf(_SC_CLK_TCK);
  if (ticks_per_s <= 0 || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1;
  return double(now.tv_sec) + 1e-9 * double(now.tv_nsec) - double(start_ticks) / double(ticks_per_s);
}

}  // namespace meshtrain
