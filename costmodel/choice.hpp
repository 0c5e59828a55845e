// One operator's decision (DESIGN.md section 3): REPLICATE, or split into `split` slices of which
// `zdp_slices` are ZDP (ZeRO-3: gathered again for backward) and the rest DP (gathered once, kept
// until the backward ends); plus activation checkpointing: none, full (only the operator's input is
// kept, its whole forward runs again before its backward) or selective (torchtitan's "selective op":
// the GEMM outputs and the attention output are kept, the elementwise work is recomputed).
//   split 1, zdp 0: DP      split 1, zdp 1: ZDP      split n, zdp k: k of n slices ZDP
// On a cluster of several nodes a sharded (not REPLICATE) choice also has a sharding group and, for
// world shards, a communication (issue 14; priced by cost_model.hpp):
//   group world, comm flat:      shards over all N ranks, one ring over all of them (the default)
//   group world, comm two-level: shards over all N ranks; all-gather across nodes on S/G, then within
//                                the node on S; reduce-scatter within the node, then across nodes
//   group node (HSDP):           shards over the G ranks of a node, replicated across nodes;
//                                gradients reduce-scattered in the node, the shard all-reduced across
// An MoE layer's MLP (Operator::experts) also has an expert-parallel degree ep (issue 35; priced by
// plan_cost.hpp): its experts placed over ep ranks of the data-parallel group (E / ep each), the
// tokens dispatched to them and combined back by all-to-alls, the choice's mode (DP, ZDP, splits,
// REPLICATE) applying within the d / ep ranks that hold the same experts. ep 1: every rank runs
// every expert on its own tokens.
#pragma once

#include <string>

namespace osdp::costmodel {

enum class Recompute { kNone, kFull, kSelective };
const char* to_string(Recompute r);  // "none", "full", "selective"

struct Choice {
  bool replicate = false;
  int split = 1;
  int zdp_slices = 0;
  bool checkpoint = false;  // full checkpointing
  bool node_group = false;  // shard within the node (HSDP) instead of over the world
  bool two_level = false;   // world shards: collectives in two levels (never with node_group)
  bool selective = false;   // selective checkpointing (never with checkpoint)
  int ep = 1;               // expert-parallel degree (an MoE layer's MLP; 1 for every other operator)

  bool is_dp() const { return !replicate && zdp_slices == 0; }
  bool is_zdp() const { return !replicate && zdp_slices == split; }
  Recompute recompute() const {
    return checkpoint ? Recompute::kFull : selective ? Recompute::kSelective : Recompute::kNone;
  }
  void set_recompute(Recompute r) {
    checkpoint = r == Recompute::kFull;
    selective = r == Recompute::kSelective;
  }
  // "DP", "ZDP", "REPLICATE", "split4:1zdp"; "/node" for a node group, "/2lvl" for two-level
  // collectives, "/ep4" for expert parallelism; "+ckpt" when checkpointed, "+sel" when selectively.
  std::string label() const;
  // The mode word used in plan files: "dp", "zdp", "mixed" or "replicate".
  std::string mode_name() const;
  // The plan file's words: "world" or "node"; "flat" or "two-level".
  std::string group_name() const { return node_group ? "node" : "world"; }
  std::string comm_name() const { return two_level ? "two-level" : "flat"; }
  friend bool operator==(const Choice&, const Choice&) = default;
};

}  // namespace osdp::costmodel
