# ffi.cmake: libbaton_jax, baton's RMSNorm kernels as typed XLA FFI handlers (kernels/ffi/) for
# JAX/XLA, on the CPU kernels and, in CUDA builds, the CUDA kernels. Built only when the XLA FFI
# headers are given:
#   cmake -DBATON_XLA_FFI_INCLUDE="$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())')"
# examples/jax/rms_norm.py loads the library with ctypes.
set(BATON_XLA_FFI_INCLUDE "" CACHE PATH
    "Directory holding xla/ffi/api/c_api.h (jax.ffi.include_dir()); builds libbaton_jax when set")

if(BATON_XLA_FFI_INCLUDE)
  if(NOT EXISTS "${BATON_XLA_FFI_INCLUDE}/xla/ffi/api/c_api.h")
    message(FATAL_ERROR "BATON_XLA_FFI_INCLUDE=${BATON_XLA_FFI_INCLUDE} has no xla/ffi/api/c_api.h; "
                        "pass the directory that jax.ffi.include_dir() prints")
  endif()
  file(GLOB BATON_FFI_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/../kernels/ffi/*.c)
  add_library(baton_jax SHARED ${BATON_FFI_SOURCES})
  # Exported: the handlers baton_xla.h declares with BATON_API; the rest of baton stays hidden.
  set_target_properties(baton_jax PROPERTIES C_VISIBILITY_PRESET hidden)
  target_link_options(baton_jax PRIVATE LINKER:--exclude-libs,ALL)
  # The handlers are part of the kernels layer: they see core/ and kernels/ only.
  target_include_directories(baton_jax PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include
                                               ${CMAKE_BINARY_DIR}/scope/kernels)
  # The XLA headers are third-party: -isystem keeps their warnings out of ours.
  target_include_directories(baton_jax SYSTEM PRIVATE ${BATON_XLA_FFI_INCLUDE})
  # baton_static is position-independent; the linker takes the kernels and what they use.
  target_link_libraries(baton_jax PRIVATE baton_static)
  set_target_properties(baton_jax PROPERTIES OUTPUT_NAME baton_jax)
  install(TARGETS baton_jax)
endif()
