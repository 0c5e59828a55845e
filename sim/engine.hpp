// The discrete-event simulator (DESIGN.md section 6). Integer ticks; events ordered by (time,
// sequence number); each rank runs its stage's program (sim/schedule.hpp): per stream, the stage's
// tasks in issue order once their dependencies are done (a receive's dependency is its send, on the
// rank of the other stage at the same local index).
//
// Ring collectives step by step over their group (Group: N - 1 steps for all-gather and
// reduce-scatter, 2(N - 1) for all-reduce on a ring of N, costmodel::ring_steps), each moving one
// chunk S/N over the link to the next member (NetworkModel). Step k of a rank starts when it has sent
// step k - 1 and received step k - 1 from its predecessor (step 0: when it and its successor have
// entered the collective); the rank is done when it has sent and received every step. These step
// events are evaluated in dependency order as a max-plus recurrence once the last member has entered
// the collective (no member can finish before the last one enters, since data from every member
// reaches every other), which gives exactly the times a priority queue of step events would, at a
// fraction of the cost. A slow link or a late rank shows up where it really would. A send takes its
// message's time on the link between the two ranks; a receive ends when its send has.
//
// Overlap: while a rank's comm stream runs a collective its compute runs `interference` times slower
// (>= 1); with overlap off a rank's compute and comm streams never run at the same time.
// Memory: each task allocates its buffers when it starts and frees its buffers when it ends; the
// resident buffers of the rank's stage (shards, optimizer states) and the device reserve are held
// throughout.
// Symmetric mode runs only `period` ranks of the network (1 on a uniform network) with the ring
// closed over them; on a homogeneous cluster every rank congruent modulo the period behaves alike, so
// this gives exactly what the full run gives. It takes schedules of one stage whose rings are the
// world's, its nodes' or across its nodes (data-parallel plans).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "sim/network.hpp"
#include "sim/schedule.hpp"
#include "sim/ticks.hpp"

namespace osdp::sim {

struct SimOptions {
  bool symmetric = false;     // simulate one period of ranks (homogeneous clusters only)
  bool overlap = true;        // compute and comm streams may run at the same time
  double interference = 1.0;  // compute slowdown while a collective runs
  std::vector<double> speed;  // per-rank compute time factor (1: nominal; 1.2: a 20% straggler); empty: all 1
  bool record_tasks = false;  // keep every task's start and end (for traces)
  int memory_rank = 0;        // the rank whose memory timeline is kept (kNoRanks: none; kAllRanks: all)
  // Called about once a second while a simulation runs (never for one under a second), with the
  // fraction of tasks finished over all ranks and the seconds spent: for progress on long runs.
  std::function<void(double fraction, double elapsed_s)> progress;
  static constexpr int kNoRanks = -1;
  static constexpr int kAllRanks = -2;
};

struct TaskRecord {
  int rank;
  int task;
  Tick start, end;
};

struct MemoryEvent {
  Tick time;
  int rank;
  int buffer;
  double delta;  // bytes allocated (> 0) or freed (< 0)
  double total;  // bytes in use afterwards, reserve included
};

struct RankStats {
  Tick finish = 0;
  Tick compute_busy = 0;  // the compute stream: kernels, and the TP collectives, re-layouts, receives
  Tick comm_busy = 0;     // the comm stream
  Tick send_busy = 0;     // the send streams
  double peak_bytes = 0;  // reserve included
  Tick peak_time = 0;
  std::array<double, kMemoryCategories> peak_breakdown{};  // at the peak, reserve excluded
  // Micro-batches in flight at once, at most: from the start of one's first forward to the end of
  // its last backward on this rank.
  int max_in_flight = 0;
};

struct SimResult {
  int world_size = 0;
  int ranks_simulated = 0;
  Tick iteration = 0;     // the last rank's finish
  int critical_rank = 0;  // the rank that finished last
  std::vector<RankStats> ranks;
  double reserve_bytes = 0;
  std::int64_t events = 0;          // every discrete event: task starts and ends, ring steps
  std::int64_t queue_events = 0;    // of which went through the event queue
  std::vector<TaskRecord> tasks;    // when record_tasks
  std::vector<MemoryEvent> memory;  // of memory_rank
  double wall_seconds = 0;

  const RankStats& peak_rank() const;  // the rank with the highest peak
};

// Throws osdp::UsageError when symmetric mode is asked of an inhomogeneous run or of a schedule it
// does not take.
SimResult simulate(const Schedule& schedule, const NetworkModel& network, const SimOptions& options);

}  // namespace osdp::sim
