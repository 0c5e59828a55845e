# INTERFACE targets that carry the project's warnings and the sanitizer flags.
add_library(osdp_warnings INTERFACE)
add_library(osdp::warnings ALIAS osdp_warnings)
target_compile_options(osdp_warnings INTERFACE
  # -Wno-restrict: GCC 12 false positives on std::string concatenation (GCC bug 105329)
  $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wpedantic -Wshadow -Wfloat-conversion
                                 $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>
                                 -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual>
  $<$<AND:$<CXX_COMPILER_ID:GNU,Clang>,$<BOOL:${OSDP_WARNINGS_AS_ERRORS}>>:-Werror>)

add_library(osdp_sanitizers INTERFACE)
add_library(osdp::sanitizers ALIAS osdp_sanitizers)
if(OSDP_SANITIZE)
  target_compile_options(osdp_sanitizers INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                                                   -fno-sanitize-recover=undefined)
  target_link_options(osdp_sanitizers INTERFACE -fsanitize=address,undefined)
endif()
set_target_properties(osdp_warnings PROPERTIES EXPORT_NAME warnings)
set_target_properties(osdp_sanitizers PROPERTIES EXPORT_NAME sanitizers)
