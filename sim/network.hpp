// Network models price one step of a ring collective on the link leaving a rank, and a point-to-point
// message between two ranks. Kept apart from the ring algorithm that uses them (sim/engine.cpp), so
// another network model can be swapped in.
//
// RingLinks: a step from one rank to the next of its ring crosses the intra-node link when both are on
// one node, else the inter-node link (ranks are numbered node by node). A step moves one chunk, S/n
// bytes of the full buffer S of a ring of n ranks, in alpha + chunk beta. A calibration's segment for
// the collective and size S, fitted on whole rings of the world (or on its rings within a node and
// across nodes: `level`), prices every step of such a ring alike (`calibrated`: the rings of a
// data-parallel group that is the whole world); every other ring (a smaller group's, a TP group's)
// prices each step on its link: by the calibration's fit of that link's level where it fitted the node
// levels (costmodel::level_step, as CostModel::link_step_s prices it), else alpha + chunk beta of the
// cluster's link. A message is such a step of its bytes (the all-gather's fit). Under a draw of
// the calibration's uncertainty (costmodel/uncertainty.hpp) a calibrated step is scaled as the cost
// model scales the segment (`prices`: CostModel::segment_factor).
#pragma once

#include "costmodel/calibration.hpp"
#include "costmodel/cluster.hpp"
#include "sim/schedule.hpp"
#include "sim/ticks.hpp"

namespace osdp::costmodel {
class CostModel;
}  // namespace osdp::costmodel

namespace osdp::sim {

class NetworkModel {
 public:
  virtual ~NetworkModel() = default;
  // Ticks of one step from rank `from` to `to` (its successor) of a ring of `ring_size` ranks, for a
  // collective over the whole buffer of `total_bytes`.
  virtual Tick ring_step_ticks(TaskKind kind, double total_bytes, int ring_size, int from, int to,
                               costmodel::RingLevel level, bool calibrated) const = 0;
  // Ticks of a message of `bytes` from rank `from` to rank `to`.
  virtual Tick p2p_ticks(double bytes, int from, int to) const = 0;
  // The smallest rank shift that maps the network onto itself (1: every link alike; the ranks
  // per node on a two-level network). Symmetric simulation runs this many ranks.
  virtual int period(int world) const = 0;
};

class RingLinks : public NetworkModel {
 public:
  // `prices`, when given, draws the calibrated steps as it draws its segments (it must outlive this).
  RingLinks(const costmodel::ClusterSpec& cluster, const costmodel::Calibration* calibration,
            const costmodel::CostModel* prices = nullptr);
  Tick ring_step_ticks(TaskKind kind, double total_bytes, int ring_size, int from, int to,
                       costmodel::RingLevel level, bool calibrated) const override;
  Tick p2p_ticks(double bytes, int from, int to) const override;
  int period(int world) const override;

 private:
  const costmodel::LinkSpec& link(int from, int to) const;
  // One step of `chunk` bytes of collective c from rank `from` to `to`, on their link.
  double link_step_s(costmodel::Collective c, double chunk, int from, int to) const;

  int nodes_, per_node_;
  costmodel::LinkSpec intra_, inter_;
  const costmodel::Calibration* calibration_;
  const costmodel::CostModel* prices_;
};

}  // namespace osdp::sim
