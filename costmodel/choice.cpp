#include "costmodel/choice.hpp"

#include <fmt/format.h>

namespace osdp::costmodel {

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kFull:
      return "full";
    case Recompute::kSelective:
      return "selective";
  }
  return "?";
}

std::string Choice::mode_name() const {
  if (replicate) return "replicate";
  if (zdp_slices == 0) return "dp";
  if (zdp_slices == split) return "zdp";
  return "mixed";
}

std::string Choice::label() const {
  std::string s;
  if (replicate)
    s = "REPLICATE";
  else if (split == 1)
    s = zdp_slices ? "ZDP" : "DP";
  else
    s = fmt::format("split{}:{}zdp", split, zdp_slices);
  if (node_group) s += "/node";
  if (two_level) s += "/2lvl";
  if (ep > 1) s += fmt::format("/ep{}", ep);
  if (checkpoint) s += "+ckpt";
  if (selective) s += "+sel";
  return s;
}

}  // namespace osdp::costmodel
