// One operator's decision (DESIGN.md section 3): REPLICATE, or split into `split` slices of which
// `zdp_slices` are ZDP (ZeRO-3: gathered again for backward) and the rest DP (gathered once, kept
// until the backward ends); plus activation checkpointing.
//   split 1, zdp 0: DP      split 1, zdp 1: ZDP      split n, zdp k: k of n slices ZDP
#pragma once

#include <string>

namespace osdp::costmodel {

struct Choice {
  bool replicate = false;
  int split = 1;
  int zdp_slices = 0;
  bool checkpoint = false;

  bool is_dp() const { return !replicate && zdp_slices == 0; }
  bool is_zdp() const { return !replicate && zdp_slices == split; }
  // "DP", "ZDP", "REPLICATE", "split4:1zdp"; "+ckpt" when checkpointed.
  std::string label() const;
  // The mode word used in plan files: "dp", "zdp", "mixed" or "replicate".
  std::string mode_name() const;
  friend bool operator==(const Choice&, const Choice&) = default;
};

}  // namespace osdp::costmodel
