// The torch backend of `osdp validate` (issue 15): each group's plans exported for FSDP2
// (validate/torch/fsdp2_export.hpp, the gpt family's default name mapping) and run side by side by one
// torchrun job (validate/torch/torch_job.hpp; python/osdp/torch/measure.py): osdp's GPT as an
// nn.Module, the plan applied with osdp.torch.apply_plan, Adam, synthetic tokens; warm-up, then timed
// steps interleaved, each the slowest rank's; the local shards' parameter, gradient and optimizer-state
// bytes of the largest rank.
#pragma once

#include "experiments/measured.hpp"
#include "validate/torch/torch_job.hpp"

namespace osdp::experiments {

GroupRunner torch_group_runner(const validate::TorchJobOptions& options);

}  // namespace osdp::experiments
