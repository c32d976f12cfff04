# libropekit_onnx.so: the ONNX model layer and the fusion API (ropekit_onnx.h, ropekit_fuse.h) as
# a shared library, for C programs and the Python binding (ropekit.fuse, ropekit.inspect).
# Included from src/onnx/CMakeLists.txt, so it sees that directory's sources and their properties.
#
# Self-contained: the core's objects are inside it and every ROPEKIT_API function of both is
# exported (the core's too: a program links ropekit_onnx INSTEAD of ropekit, never both, since
# each library keeps its own thread-local error message). The rk_* internals stay hidden, and
# -Bsymbolic binds its own calls to its own copies. Not built in fuzz builds (instrumented code).
if(ROPEKIT_FUZZ)
  return()
endif()
get_target_property(_rk_onnx_srcs ropekit_onnx SOURCES)
get_target_property(_rk_onnx_defs ropekit_onnx COMPILE_DEFINITIONS)
add_library(ropekit_onnx_shared SHARED ${_rk_onnx_srcs} $<TARGET_OBJECTS:ropekit_objects>)
target_include_directories(ropekit_onnx_shared
  PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}" "${PROJECT_SOURCE_DIR}/src/core" "${_rk_gen}"
          "${ROPEKIT_PROTOBUF_C_INCLUDE}")
target_compile_definitions(ropekit_onnx_shared PRIVATE ${_rk_onnx_defs})
target_link_libraries(ropekit_onnx_shared PRIVATE "${ROPEKIT_PROTOBUF_C_LIB}" m Threads::Threads)
target_link_options(ropekit_onnx_shared PRIVATE "LINKER:-Bsymbolic")
if(NOT ROPEKIT_SANITIZE) # sanitizer runtimes come with the executable, not the shared library
  target_link_options(ropekit_onnx_shared PRIVATE "LINKER:--no-undefined")
endif()
set_target_properties(ropekit_onnx_shared PROPERTIES OUTPUT_NAME ropekit_onnx EXPORT_NAME ropekit_onnx
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  LIBRARY_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}")
add_library(ropekit::ropekit_onnx ALIAS ropekit_onnx_shared)

install(TARGETS ropekit_onnx_shared EXPORT ropekitTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES "${PROJECT_SOURCE_DIR}/include/ropekit_onnx.h" "${PROJECT_SOURCE_DIR}/include/ropekit_fuse.h"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# pkg-config: `pkg-config --libs ropekit_onnx` (relocatable like ropekit.pc)
configure_file("${PROJECT_SOURCE_DIR}/cmake/ropekit_onnx.pc.in" "${PROJECT_BINARY_DIR}/ropekit_onnx.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/ropekit_onnx.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
