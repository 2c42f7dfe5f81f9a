# Warning flags for meshtrain's own targets (dependencies are included as system headers).
add_library(meshtrain_warnings INTERFACE)
target_compile_options(meshtrain_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter>)
