# baton-deps.cmake: finds the libraries libbaton links (libuv and Jansson through pkg-config,
# Threads, OpenBLAS as baton::openblas), for baton's own build and for the installed package
# (baton-config.cmake includes it), so that both name the same targets.
#   baton's build: everything is required.
#   The package sets BATON_DEPS_STATIC_OPTIONAL: libuv stays required (baton_uv.h includes uv.h,
#   so baton::baton needs it), the rest is what libbaton.a alone needs and is looked up quietly;
#   baton_static_deps_FOUND says whether all of it was found, baton_static_deps_MISSING what not.
find_package(PkgConfig REQUIRED)
if(NOT TARGET PkgConfig::LIBUV)
  pkg_check_modules(LIBUV REQUIRED IMPORTED_TARGET libuv>=1.40)
endif()
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)

if(BATON_DEPS_STATIC_OPTIONAL)
  set(_baton_req QUIET)
  set(_baton_lib_req "")
else()
  set(_baton_req REQUIRED)
  set(_baton_lib_req REQUIRED)
endif()
set(baton_static_deps_FOUND TRUE)
set(baton_static_deps_MISSING "")
if(NOT TARGET PkgConfig::JANSSON)
  pkg_check_modules(JANSSON ${_baton_req} IMPORTED_TARGET jansson>=2.10)
  if(NOT JANSSON_FOUND)
    set(baton_static_deps_FOUND FALSE)
    list(APPEND baton_static_deps_MISSING "jansson (libjansson-dev)")
  endif()
endif()

# OpenBLAS: Debian ships it under openblas-pthread/ (cblas.h) or the top directories.
find_library(OPENBLAS_LIBRARY NAMES openblas PATH_SUFFIXES openblas-pthread ${_baton_lib_req})
if(OPENBLAS_LIBRARY AND NOT TARGET baton::openblas)
  add_library(baton::openblas UNKNOWN IMPORTED)
  set_target_properties(baton::openblas PROPERTIES IMPORTED_LOCATION "${OPENBLAS_LIBRARY}")
elseif(NOT OPENBLAS_LIBRARY)
  set(baton_static_deps_FOUND FALSE)
  list(APPEND baton_static_deps_MISSING "OpenBLAS (libopenblas-dev)")
endif()
