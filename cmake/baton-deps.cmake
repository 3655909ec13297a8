# baton-deps.cmake: finds the libraries libbaton links (Jansson and libuv through pkg-config,
# Threads, OpenBLAS as baton::openblas), for baton's own build and for the installed package
# (baton-config.cmake includes it), so that both name the same targets.
find_package(PkgConfig REQUIRED)
if(NOT TARGET PkgConfig::JANSSON)
  pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson>=2.10)
endif()
if(NOT TARGET PkgConfig::LIBUV)
  pkg_check_modules(LIBUV REQUIRED IMPORTED_TARGET libuv>=1.40)
endif()
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)

# OpenBLAS: Debian ships it under openblas-pthread/ (cblas.h) or the top directories.
find_library(OPENBLAS_LIBRARY NAMES openblas PATH_SUFFIXES openblas-pthread REQUIRED)
if(NOT TARGET baton::openblas)
  add_library(baton::openblas UNKNOWN IMPORTED)
  set_target_properties(baton::openblas PROPERTIES IMPORTED_LOCATION "${OPENBLAS_LIBRARY}")
endif()
