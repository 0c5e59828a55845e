// Writing result files: whole or not at all. The contents go to a temporary file beside the target,
// are fsync'd, and the temporary is renamed over the target (then the directory is fsync'd), so an
// interrupted run or a power cut never leaves a half-written file behind. The one atomic writer of
// osdp: plan files, sweep and validation results, calibration files.
#pragma once

#include <string>

namespace osdp::costmodel {

// Throws InputError naming the path when it cannot be written.
void write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace osdp::costmodel
