// Writing result files: whole or not at all (a temporary file renamed over the target), so an
// interrupted run never leaves a half-written file behind.
#pragma once

#include <string>

namespace osdp::costmodel {

// Throws InputError naming the path when it cannot be written.
void write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace osdp::costmodel
