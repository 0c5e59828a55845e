// The schedule's vocabulary (sim/schedule.hpp): names of task kinds, streams, payloads, memory
// categories and buffer roles, and how they map onto one another and onto the collectives of
// costmodel/collective.hpp.
#include "sim/schedule.hpp"

namespace osdp::sim {

const char* to_string(TaskKind k) {
  switch (k) {
    case TaskKind::kForward:
      return "forward";
    case TaskKind::kRecompute:
      return "recompute";
    case TaskKind::kBackward:
      return "backward";
    case TaskKind::kOptimizer:
      return "optimizer";
    case TaskKind::kAllGather:
    case TaskKind::kReduceScatter:
    case TaskKind::kAllReduce:
    case TaskKind::kAllToAll:
      return costmodel::to_string(collective_of(k));  // "allgather", ...
    case TaskKind::kSend:
      return "send";
    case TaskKind::kRecv:
      return "recv";
  }
  return "?";
}

const char* to_string(Stream s) {
  switch (s) {
    case Stream::kCompute:
      return "compute";
    case Stream::kComm:
      return "comm";
    case Stream::kSendNext:
      return "send next";
    case Stream::kSendPrevious:
      return "send previous";
  }
  return "?";
}

const char* to_string(Payload p) {
  switch (p) {
    case Payload::kWeights:
      return "weights";
    case Payload::kGradients:
      return "gradients";
    case Payload::kActivations:
      return "activations";
    case Payload::kActivationGradients:
      return "activation gradients";
  }
  return "?";
}

const char* to_string(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kShard:
      return "shards";
    case MemoryCategory::kOptimizer:
      return "optimizer";
    case MemoryCategory::kGatheredWeight:
      return "gathered_weights";
    case MemoryCategory::kGradient:
      return "gradients";
    case MemoryCategory::kActivation:
      return "activations";
    case MemoryCategory::kWorkspace:
      return "workspace";
  }
  return "?";
}

const char* to_string(BufferRole r) {
  switch (r) {
    case BufferRole::kStates:
      return "states";
    case BufferRole::kAdam:
      return "adam";
    case BufferRole::kGatheredWeight:
      return "gathered_weight";
    case BufferRole::kActivations:
      return "activations";
    case BufferRole::kForwardScratch:
      return "forward_scratch";
    case BufferRole::kRecomputed:
      return "recomputed";
    case BufferRole::kWorkspace:
      return "workspace";
    case BufferRole::kGradient:
      return "gradient";
    case BufferRole::kTiedGradient:
      return "tied_gradient";
  }
  return "?";
}

bool is_collective(TaskKind k) {
  return k == TaskKind::kAllGather || k == TaskKind::kReduceScatter || k == TaskKind::kAllReduce ||
         k == TaskKind::kAllToAll;
}

costmodel::Collective collective_of(TaskKind k) {
  return k == TaskKind::kAllGather       ? costmodel::Collective::kAllGather
         : k == TaskKind::kReduceScatter ? costmodel::Collective::kReduceScatter
         : k == TaskKind::kAllToAll      ? costmodel::Collective::kAllToAll
                                         : costmodel::Collective::kAllReduce;
}

TaskKind task_kind_of(costmodel::Collective c) {
  switch (c) {
    case costmodel::Collective::kAllGather:
      return TaskKind::kAllGather;
    case costmodel::Collective::kReduceScatter:
      return TaskKind::kReduceScatter;
    case costmodel::Collective::kAllReduce:
      return TaskKind::kAllReduce;
    case costmodel::Collective::kAllToAll:
      return TaskKind::kAllToAll;
  }
  return TaskKind::kAllGather;
}

}  // namespace osdp::sim
