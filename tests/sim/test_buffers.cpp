// The schedule's buffers carry their role, operator, slice and site (sim::Buffer), so that whoever runs
// the schedule never has to read a buffer's name. The expected buffers are listed here by hand from
// the FSDP semantics of sim/schedule.hpp, per operator u with n slices of which the first k are ZDP:
//   resident:  the states (w + g shards) and the Adam states of every operator;
//   forward:   every slice gathered once (site 0); the saved activations; a checkpointed operator's
//              forward scratch (its internals, through its forward only);
//   LM head of a tied embedding (site 1): its ZDP slices gathered again (its DP slices are still held),
//              a workspace, and the full tied gradient (every slice, reduce-scattered at the end);
//   backward:  every ZDP slice of an untied operator gathered again (twice under checkpoint_regather
//              when checkpointed: once for the recompute, once for the backward); a checkpointed
//              operator's recomputed internals; a workspace; a gradient per slice (none for REPLICATE,
//              which keeps its gradient among its states, nor for a tied embedding).
// Besides the list, each buffer is allocated by one task of its own operator whose kind fits the role
// (gathers by all-gathers, activations and scratch by the forward, recomputed internals by the
// recompute, workspaces and gradients by the backward), gathers and gradients by a task of their slice,
// and each buffer's memory category is the one of its role.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "costmodel/cost_model.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/workload.hpp"
#include "sim/replay.hpp"
#include "sim/schedule.hpp"

namespace {

using namespace osdp;
using sim::BufferRole;
using sim::TaskKind;

// A buffer as "role op/slice/site", so that a mismatch prints readably.
using Key = std::string;
Key key(BufferRole role, int op, int slice, int site) {
  return std::string(sim::to_string(role)) + " " + std::to_string(op) + "/" + std::to_string(slice) + "/" +
         std::to_string(site);
}

costmodel::ModelSpec one_layer(bool tied) {
  costmodel::ModelSpec m;
  m.name = tied ? "one-layer-tied" : "one-layer";
  m.stages = {costmodel::StageSpec{1, 64, 4, 256}};
  m.seq = 32;
  m.vocab = 128;
  m.tied_embeddings = tied;
  m.precision = costmodel::Precision::kFp32;
  return m;
}

costmodel::ClusterSpec four_ranks() {
  costmodel::ClusterSpec c;
  c.name = "four";
  c.nodes = 1;
  c.devices_per_node = 4;
  c.memory_bytes = 1e12;
  c.intra = costmodel::LinkSpec{10e-6, 12e9};
  return c;
}

sim::Schedule schedule_of(const costmodel::ModelSpec& m, const std::vector<costmodel::Choice>& choices,
                          bool regather, int prefetch) {
  const costmodel::Workload w = costmodel::lower(m);
  REQUIRE(w.operators.size() == choices.size());
  costmodel::CostOptions co;
  co.checkpoint_regather = regather;
  co.prefetch = prefetch;
  const costmodel::CostModel cost(four_ranks(), nullptr, m.precision, co);
  costmodel::Plan plan;
  plan.model = m;
  plan.cluster = four_ranks();
  plan.batch_size = 2;
  plan.prefetch = prefetch;
  plan.cost_options = co;
  costmodel::set_data_parallel(plan, w, choices);
  return sim::build_schedule(plan, w, sim::plan_cost_model(plan));
}

std::vector<Key> sorted(std::vector<Key> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<Key> keys(const sim::Schedule& s) {
  std::vector<Key> out;
  for (const sim::Buffer& b : s.buffers) out.push_back(key(b.role, b.op, b.slice, b.site));
  return sorted(out);
}

// The task kinds that may allocate a buffer of role r (none: resident).
std::vector<TaskKind> allocated_by(BufferRole r) {
  switch (r) {
    case BufferRole::kStates:
    case BufferRole::kAdam:
      return {};
    case BufferRole::kGatheredWeight:
      return {TaskKind::kAllGather};
    case BufferRole::kActivations:
    case BufferRole::kForwardScratch:
      return {TaskKind::kForward};
    case BufferRole::kRecomputed:
      return {TaskKind::kRecompute};
    case BufferRole::kWorkspace:
    case BufferRole::kGradient:
    case BufferRole::kTiedGradient:
      return {TaskKind::kBackward};
  }
  return {};
}

sim::MemoryCategory expected_category(BufferRole r) {
  switch (r) {
    case BufferRole::kStates:
      return sim::MemoryCategory::kShard;
    case BufferRole::kAdam:
      return sim::MemoryCategory::kOptimizer;
    case BufferRole::kGatheredWeight:
      return sim::MemoryCategory::kGatheredWeight;
    case BufferRole::kActivations:
    case BufferRole::kForwardScratch:
    case BufferRole::kRecomputed:
      return sim::MemoryCategory::kActivation;
    case BufferRole::kWorkspace:
      return sim::MemoryCategory::kWorkspace;
    case BufferRole::kGradient:
    case BufferRole::kTiedGradient:
      return sim::MemoryCategory::kGradient;
  }
  return sim::MemoryCategory::kActivation;
}

// Who allocates each buffer, and whether it fits its role (see the comment at the top).
void check_allocations(const sim::Schedule& s) {
  std::vector<int> allocs(s.buffers.size(), 0);
  for (const int b : s.resident) {
    INFO("resident buffer " << s.buffers[b].name);
    CHECK((s.buffers[b].role == BufferRole::kStates || s.buffers[b].role == BufferRole::kAdam));
    ++allocs[b];
  }
  for (const sim::Task& t : s.tasks)
    for (const int b : t.allocs) {
      const sim::Buffer& buf = s.buffers[b];
      INFO("buffer " << buf.name << " (" << sim::to_string(buf.role) << ") allocated by task " << t.name);
      ++allocs[b];
      CHECK(buf.op == t.op);
      const auto kinds = allocated_by(buf.role);
      CHECK(std::find(kinds.begin(), kinds.end(), t.kind) != kinds.end());
      if (buf.role == BufferRole::kGatheredWeight || buf.role == BufferRole::kGradient)
        CHECK(buf.slice == t.slice);
    }
  for (std::size_t b = 0; b < s.buffers.size(); ++b) {
    INFO("buffer " << s.buffers[b].name);
    CHECK(allocs[b] == 1);
    CHECK(s.buffers[b].category() == expected_category(s.buffers[b].role));
  }
}

constexpr BufferRole kStates = BufferRole::kStates, kAdam = BufferRole::kAdam,
                     kGathered = BufferRole::kGatheredWeight, kActs = BufferRole::kActivations,
                     kScratch = BufferRole::kForwardScratch, kRecomputed = BufferRole::kRecomputed,
                     kWorkspace = BufferRole::kWorkspace, kGrad = BufferRole::kGradient,
                     kTied = BufferRole::kTiedGradient;

}  // namespace

TEST_CASE(
    "buffer roles: tied embedding split 1 of 2 ZDP, checkpointed ZDP attention, checkpointed "
    "REPLICATE MLP",
    "[schedule][buffers]") {
  // Operators: 0 embedding (tied), 1 layer0.attention, 2 layer0.mlp.
  const costmodel::ModelSpec m = one_layer(true);
  const std::vector<costmodel::Choice> choices{{false, 2, 1, false}, {false, 1, 1, true}, {true, 1, 0, true}};
  // embedding: both slices gathered for the lookup; slice 0 (ZDP) again at the head, slice 1 (DP)
  // still held there; the head's workspace and the tied gradient; the lookup's backward workspace.
  const std::vector<Key> embedding{key(kStates, 0, 0, 0),    key(kAdam, 0, 0, 0), key(kGathered, 0, 0, 0),
                                   key(kGathered, 0, 1, 0),  key(kActs, 0, 0, 0), key(kGathered, 0, 0, 1),
                                   key(kWorkspace, 0, 0, 1), key(kTied, 0, 0, 0), key(kWorkspace, 0, 0, 0)};
  // attention: gathered for the forward, again for the backward (reused by the recompute).
  const std::vector<Key> attention{
      key(kStates, 1, 0, 0),     key(kAdam, 1, 0, 0),      key(kGathered, 1, 0, 0),
      key(kActs, 1, 0, 0),       key(kScratch, 1, 0, 0),   key(kGathered, 1, 0, 0),
      key(kRecomputed, 1, 0, 0), key(kWorkspace, 1, 0, 0), key(kGrad, 1, 0, 0)};
  // mlp: full weights and gradient among its states; no gathers, no gradient buffer.
  const std::vector<Key> mlp{key(kStates, 2, 0, 0),  key(kAdam, 2, 0, 0),       key(kActs, 2, 0, 0),
                             key(kScratch, 2, 0, 0), key(kRecomputed, 2, 0, 0), key(kWorkspace, 2, 0, 0)};
  std::vector<Key> expected;
  for (const auto* part : {&embedding, &attention, &mlp})
    expected.insert(expected.end(), part->begin(), part->end());

  REQUIRE(costmodel::lower(m).operators[0].tied_gradient);
  for (const int prefetch : {0, 1, 2}) {
    CAPTURE(prefetch);
    const sim::Schedule s = schedule_of(m, choices, false, prefetch);
    CHECK(keys(s) == sorted(expected));
    check_allocations(s);
    // checkpoint_regather: the ZDP attention gathers once more for its recompute; the REPLICATE MLP
    // has nothing to gather.
    std::vector<Key> regather = expected;
    regather.push_back(key(kGathered, 1, 0, 0));
    const sim::Schedule r = schedule_of(m, choices, true, prefetch);
    CHECK(keys(r) == sorted(regather));
    check_allocations(r);
  }
}

TEST_CASE(
    "buffer roles: untied DP embedding, ZDP attention, checkpointed MLP split 1 of 2 ZDP, REPLICATE "
    "head",
    "[schedule][buffers]") {
  // Operators: 0 embedding, 1 layer0.attention, 2 layer0.mlp, 3 head.
  const costmodel::ModelSpec m = one_layer(false);
  const std::vector<costmodel::Choice> choices{
      {false, 1, 0, false}, {false, 1, 1, false}, {false, 2, 1, true}, {true, 1, 0, false}};
  const std::vector<Key> expected{
      // embedding (DP): gathered once, kept through its backward.
      key(kStates, 0, 0, 0), key(kAdam, 0, 0, 0), key(kGathered, 0, 0, 0), key(kActs, 0, 0, 0),
      key(kWorkspace, 0, 0, 0), key(kGrad, 0, 0, 0),
      // attention (ZDP): gathered for the forward and again for the backward.
      key(kStates, 1, 0, 0), key(kAdam, 1, 0, 0), key(kGathered, 1, 0, 0), key(kGathered, 1, 0, 0),
      key(kActs, 1, 0, 0), key(kWorkspace, 1, 0, 0), key(kGrad, 1, 0, 0),
      // mlp: both slices for the forward, slice 0 (ZDP) again for the backward; a gradient per slice.
      key(kStates, 2, 0, 0), key(kAdam, 2, 0, 0), key(kGathered, 2, 0, 0), key(kGathered, 2, 1, 0),
      key(kGathered, 2, 0, 0), key(kActs, 2, 0, 0), key(kScratch, 2, 0, 0), key(kRecomputed, 2, 0, 0),
      key(kWorkspace, 2, 0, 0), key(kGrad, 2, 0, 0), key(kGrad, 2, 1, 0),
      // head (REPLICATE).
      key(kStates, 3, 0, 0), key(kAdam, 3, 0, 0), key(kActs, 3, 0, 0), key(kWorkspace, 3, 0, 0)};
  REQUIRE(costmodel::lower(m).operators.size() == 4);
  for (const int prefetch : {0, 1}) {
    CAPTURE(prefetch);
    const sim::Schedule s = schedule_of(m, choices, false, prefetch);
    CHECK(keys(s) == sorted(expected));
    check_allocations(s);
    std::vector<Key> regather = expected;
    regather.push_back(key(kGathered, 2, 0, 0));  // the mlp's ZDP slice, for its recompute
    const sim::Schedule r = schedule_of(m, choices, true, prefetch);
    CHECK(keys(r) == sorted(regather));
    check_allocations(r);
  }
}

TEST_CASE("buffer roles: the resident buffers are each operator's states and Adam states",
          "[schedule][buffers]") {
  const costmodel::ModelSpec m = one_layer(false);
  const sim::Schedule s =
      schedule_of(m, std::vector<costmodel::Choice>(4, costmodel::Choice{false, 1, 1, false}), false, 0);
  std::vector<Key> resident;
  for (const int b : s.resident) resident.push_back(key(s.buffers[b].role, s.buffers[b].op, 0, 0));
  std::vector<Key> expected;
  for (int u = 0; u < 4; ++u) {
    expected.push_back(key(kStates, u, 0, 0));
    expected.push_back(key(kAdam, u, 0, 0));
  }
  CHECK(sorted(resident) == sorted(expected));
}
