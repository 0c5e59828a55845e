// osdp validate (placeholder while issue 5 is in progress).
#include "cli/commands.hpp"

namespace osdp::cli {

Action add_validate_command(CLI::App& app) {
  (void)app;
  return [] { return kExitInput; };
}

}  // namespace osdp::cli
