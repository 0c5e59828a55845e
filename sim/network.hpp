// Network models price one step of a ring collective on the link leaving a rank. Kept apart from
// the ring algorithm that uses them (sim/engine.cpp), so another network model can be swapped in.
//
// RingLinks: a rank's link is the intra-node link, or the inter-node link when the next rank of the
// ring is on the next node (ranks are numbered node by node). A step moves one chunk, S/N bytes of
// the full buffer S, in alpha + chunk beta. A calibration's segment for the collective and size S,
// fitted on whole rings, prices every link alike. Rings within a node and across nodes (issue 14)
// take every step on their level's link.
#pragma once

#include <vector>

#include "costmodel/calibration.hpp"
#include "costmodel/cluster.hpp"
#include "sim/schedule.hpp"
#include "sim/ticks.hpp"

namespace osdp::sim {

class NetworkModel {
 public:
  virtual ~NetworkModel() = default;
  // Ticks of one ring step from `rank` to the next rank, for a collective over the whole buffer.
  virtual Tick step_ticks(TaskKind kind, double total_bytes, int world, int rank) const = 0;
  // Ticks of one step of a ring within a node (kIntra) or across nodes (kInter) of `ring_size` ranks
  // (node groups and two-level collectives); every step of such a ring is on that level's link.
  virtual Tick level_step_ticks(TaskKind kind, double total_bytes, int ring_size,
                                costmodel::RingLevel level) const = 0;
  // The smallest rank shift that maps the network onto itself (1: every link alike; the ranks
  // per node on a two-level network). Symmetric simulation runs this many ranks.
  virtual int period(int world) const = 0;
};

class RingLinks : public NetworkModel {
 public:
  RingLinks(const costmodel::ClusterSpec& cluster, const costmodel::Calibration* calibration);
  Tick step_ticks(TaskKind kind, double total_bytes, int world, int rank) const override;
  // By the calibration's segment of the level where it has one (Calibration::intra, inter), else on
  // the cluster's link of the level (a calibration's world segments were fitted on world rings).
  Tick level_step_ticks(TaskKind kind, double total_bytes, int ring_size,
                        costmodel::RingLevel level) const override;
  int period(int world) const override;

 private:
  int nodes_, per_node_;
  costmodel::LinkSpec intra_, inter_;
  const costmodel::Calibration* calibration_;
};

}  // namespace osdp::sim
