# osdp_add_backend_module(<target> SOURCES <files...> LIBRARIES <targets...> [OUTPUT_DIRECTORY <dir>])
#
# A backend as a module: <target>.so (no "lib" prefix), a MODULE library that validate/backends.cpp
# loads with dlopen when the backend is asked for (the search order is in validate/backends.hpp).
# - Only the entry point (osdp_backend_module, marked visibility("default")) is exported: the code is
#   compiled with hidden visibility and the static libraries it links (its own PIC copy of the osdp
#   code it uses) keep their symbols local (--exclude-libs), so nothing in it can interpose on the
#   program's copy or the other way round.
# - Every symbol must resolve when it is linked (--no-undefined): a module that would fail in dlopen
#   fails the build instead. Not in a clang sanitizer build: clang links the sanitizers' runtime into
#   the program alone, and a module finds it there when it is loaded (the plain build checks).
# - The program checks the module's build key (OSDP_BACKEND_ABI, top-level CMakeLists.txt: version,
#   compiler, sanitizers, the interface headers' hash) before it calls anything else in it.
# - Installed modules keep the library directories they were linked against (the CUDA toolkit's) in
#   their RUNPATH.
function(osdp_add_backend_module target)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES;LIBRARIES" ${ARGN})
  add_library(${target} MODULE ${ARG_SOURCES})
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    INSTALL_RPATH_USE_LINK_PATH ON)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  endif()
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${target} PRIVATE OSDP_BACKEND_ABI="${OSDP_BACKEND_ABI}")
  target_link_libraries(${target} PRIVATE ${ARG_LIBRARIES} osdp::warnings osdp::sanitizers)
  target_link_options(${target} PRIVATE LINKER:--exclude-libs,ALL)
  if(NOT (CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND (OSDP_SANITIZE OR OSDP_BUILD_FUZZERS)))
    target_link_options(${target} PRIVATE LINKER:--no-undefined)
  endif()
endfunction()
