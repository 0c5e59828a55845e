// The order of a pipeline's transfers under NCCL's rules, without a GPU: does every stage program
// (sim::stage_program, which the schedule and so the executor follow) finish when the sends and receives are
// placed as the nccl backend places them (validate/cuda/nccl_backend.hpp)?
//
// The model is the strictest reading of NCCL's point to point:
// - a send and its receive complete together, once both have started (a rendezvous: no buffering);
// - an operation starts only after the operations before it on its CUDA stream completed, and after
//   every operation issued before it on the same NCCL communicator by the same rank (one NCCL
//   communicator runs its kernels one at a time, in the order they were issued);
// - a send issued from the caller's stream may start only once the caller's stream reached the point
//   where it was issued (the staging copy's event);
// - messages from one rank to another on one communicator match in the order issued.
// Stage s's program, in order: a forward of micro-batch k receives from s - 1 (on the compute stream)
// and then sends to s + 1; a backward receives from s + 1 and then sends to s - 1.
//
// Three placements:
// - kPerDirection (the backend's): sends to higher ranks on one communicator and stream, sends to
//   lower ranks on another; receives on the compute stream, on the communicator of their direction;
// - kOneCommunicator: the same streams, one communicator for everything;
// - kOnCaller: every send and receive on the compute stream and one communicator.
// The backend's must finish for every schedule, 2-8 stages and 1-10 micro-batches. The other two
// deadlock 1F1B as soon as an activation and a gradient are in flight between two stages at once:
// that the model finds those deadlocks is what makes its verdict on the first worth having.
#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include "costmodel/plan.hpp"
#include "sim/schedule.hpp"

namespace {

namespace costmodel = osdp::costmodel;
namespace sim = osdp::sim;

enum class Placement { kPerDirection, kOneCommunicator, kOnCaller };

struct Op {
  int rank = 0;
  bool send = false;
  int peer = 0;
  int stream = 0;         // 0 compute, 1 to higher ranks, 2 to lower ranks
  int comm = 0;           // 0 to higher ranks (or the only one), 1 to lower ranks
  int issued_after = -1;  // the compute-stream op issued just before it (a send's copy), or -1
  int stream_prev = -1;   // the previous op on its stream
  int comm_prev = -1;     // the previous op this rank issued on its communicator
  int match = -1;         // the peer's op it pairs with
  bool started = false, done = false;
};

// Builds every rank's ops in issue order and pairs them; returns whether all of them complete.
bool runs_to_completion(costmodel::PipelineSchedule schedule, int pp, int m, Placement placement) {
  std::vector<Op> ops;
  for (int s = 0; s < pp; ++s) {
    int last_on_stream[3] = {-1, -1, -1}, last_on_comm[2] = {-1, -1}, last_compute = -1;
    const auto add = [&](bool send, int peer) {
      Op o;
      o.rank = s;
      o.send = send;
      o.peer = peer;
      const bool up = send ? peer > s : peer < s;  // the direction the message travels
      o.comm = placement == Placement::kPerDirection && !up ? 1 : 0;
      o.stream = !send || placement == Placement::kOnCaller ? 0 : (peer > s ? 1 : 2);
      o.issued_after = o.stream == 0 ? -1 : last_compute;
      o.stream_prev = last_on_stream[o.stream];
      o.comm_prev = last_on_comm[o.comm];
      const int id = static_cast<int>(ops.size());
      ops.push_back(o);
      last_on_stream[o.stream] = id;
      last_on_comm[o.comm] = id;
      if (o.stream == 0) last_compute = id;
    };
    for (const auto& [backward, mb] : sim::stage_program(schedule, pp, s, m)) {
      (void)mb;
      if (!backward) {
        if (s > 0) add(false, s - 1);
        if (s + 1 < pp) add(true, s + 1);
      } else {
        if (s + 1 < pp) add(false, s + 1);
        if (s > 0) add(true, s - 1);
      }
    }
  }
  // Pair the i-th send from a to b on a communicator with the i-th receive at b from a on it.
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (!ops[i].send) continue;
    int nth = 0;
    for (std::size_t j = 0; j < i; ++j)
      nth += ops[j].send && ops[j].rank == ops[i].rank && ops[j].peer == ops[i].peer &&
             ops[j].comm == ops[i].comm;
    for (std::size_t j = 0; j < ops.size(); ++j) {
      const Op& r = ops[j];
      if (r.send || r.rank != ops[i].peer || r.peer != ops[i].rank || r.comm != ops[i].comm) continue;
      if (nth-- == 0) {
        ops[i].match = static_cast<int>(j);
        ops[j].match = static_cast<int>(i);
        break;
      }
    }
    REQUIRE(ops[i].match >= 0);  // the programs send and receive the same messages
  }
  const auto done = [&](int id) { return id < 0 || ops[static_cast<std::size_t>(id)].done; };
  for (bool progress = true; progress;) {
    progress = false;
    for (Op& o : ops) {
      if (!o.started && done(o.stream_prev) && done(o.comm_prev) && done(o.issued_after)) {
        o.started = true;
        progress = true;
      }
    }
    for (Op& o : ops) {
      if (!o.done && o.started && ops[static_cast<std::size_t>(o.match)].started) {
        o.done = true;
        progress = true;
      }
    }
  }
  for (const Op& o : ops)
    if (!o.done) return false;
  return true;
}

}  // namespace

TEST_CASE("the nccl backend's transfers finish for every pipeline under NCCL's rendezvous rules",
          "[validate][pipeline]") {
  using costmodel::PipelineSchedule;
  for (const PipelineSchedule schedule : {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B})
    for (int pp = 2; pp <= 8; ++pp)
      for (int m = 1; m <= 10; ++m) {
        INFO(costmodel::to_string(schedule) << ", " << pp << " stages, " << m << " micro-batches");
        CHECK(runs_to_completion(schedule, pp, m, Placement::kPerDirection));
      }
}

TEST_CASE("sends that block the caller's stream deadlock 1F1B, which the model detects",
          "[validate][pipeline]") {
  using costmodel::PipelineSchedule;
  // Two stages, two micro-batches: stage 0 sends micro-batch 1's activation while stage 1 sends
  // micro-batch 0's gradient; each waits for a receive the other has queued behind its send.
  CHECK_FALSE(runs_to_completion(PipelineSchedule::k1F1B, 2, 2, Placement::kOnCaller));
  // One micro-batch has nothing in flight both ways; GPipe sends every activation before any gradient.
  CHECK(runs_to_completion(PipelineSchedule::k1F1B, 2, 1, Placement::kOnCaller));
  CHECK(runs_to_completion(PipelineSchedule::kGpipe, 4, 6, Placement::kOnCaller));
}

TEST_CASE("one communicator for both directions deadlocks 1F1B, though the sends have their own streams",
          "[validate][pipeline]") {
  using costmodel::PipelineSchedule;
  // Why the backend makes two communicators: on one, stage 1's receive of micro-batch 1's activation
  // waits behind its send of micro-batch 0's gradient, which waits for stage 0 to receive it, behind
  // stage 0's send of micro-batch 1's activation, which waits for that very receive.
  for (int pp = 2; pp <= 8; ++pp)
    for (int m = 1; m <= 10; ++m) {
      INFO(pp << " stages, " << m << " micro-batches");
      // GPipe sends every activation before any gradient: one communicator serves it.
      CHECK(runs_to_completion(PipelineSchedule::kGpipe, pp, m, Placement::kOneCommunicator));
      // 1F1B has an activation and a gradient in flight between two stages at once when m >= 2.
      CHECK(runs_to_completion(PipelineSchedule::k1F1B, pp, m, Placement::kOneCommunicator) == (m == 1));
    }
}
