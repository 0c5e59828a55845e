// The torch backend of `osdp validate` (issue 15): each group's plans exported for FSDP2
// (validate/torch/fsdp2_export.hpp, the gpt family's default name mapping) and run side by side by one
// torchrun job (validate/torch/torch_job.hpp; python/osdp/torch/measure.py): osdp's GPT as an
// nn.Module, the plan applied with osdp.torch.apply_plan, Adam, synthetic tokens; warm-up, then timed
// steps interleaved, each the slowest rank's; the local shards' parameter, gradient and optimizer-state
// bytes of the largest rank.
//
// The numerics check (TorchJobOptions::check): before the timing, each fp32 plan also runs one step
// in FSDP2 on osdp's executor arithmetic (python/osdp/torch/executor_model.py) from the executor's own
// initial weights and tokens, and its loss, gradients and updated weights are compared with osdp's
// executor's step (Measurement::check_*, tolerances kCheck*): the export then means what the plan
// means. The executor runs here, in this process, unsharded on the global batch (one rank, every
// operator DP and whole); tests/executor/test_executor_mpi.cpp holds every sharded plan's step equal to
// that one.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "experiments/measured.hpp"
#include "validate/torch/torch_job.hpp"

namespace osdp::experiments {

// `ran`, when given, receives what the last job said of itself: {"torch": version, "backend": "gloo" or
// "nccl", "device", "threads"} (for the provenance).
GroupRunner torch_group_runner(const validate::TorchJobOptions& options,
                               std::shared_ptr<nlohmann::json> ran = nullptr);

// What the torch job checks one step of `plan` against, written in `dir` as reference-INDEX.*: the
// global batch's tokens (int32, samples x (seq + 1)) and Adam's parameters; with `executor_step` also
// osdp's executor's unsharded step (the initial weights, the updated weights and the gradients in the
// IR's logical order, float32, the loss, the IR's operators and weights), which the job compares a
// model built as osdp.torch's own with. A transformers model (the export names its model_type) is
// checked against the same model unsharded, in the job: it needs only the tokens.
nlohmann::json check_reference(const costmodel::Plan& plan, const std::string& dir, int index,
                               bool executor_step);

}  // namespace osdp::experiments
