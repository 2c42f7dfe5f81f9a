// The host build's BLAS as it reports itself: OpenBLAS's version, kernel set and threads, or just
// "a CBLAS" for others.
#include "kernels/blas_info.hpp"

#include <cblas.h>

#include <sstream>

namespace meshtrain {

BlasInfo blas_info() {
  BlasInfo info;
#if defined(MESHTRAIN_HAVE_OPENBLAS)
  info.config = openblas_get_config();  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Cooperlake ..."
  std::istringstream words(info.config);
  std::string name, version;
  words >> name >> version;
  info.library = name + " " + version;
  info.core = openblas_get_corename();
  info.threads = openblas_get_num_threads();
#else
  info.library = "a CBLAS (not OpenBLAS)";
#endif
  return info;
}

}  // namespace meshtrain
