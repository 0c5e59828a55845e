#include "experiments/torch_measured.hpp"

#include <cstdint>
#include <fstream>

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/workload.hpp"
#include "experiments/numerics_check.hpp"
#include "validate/executor/backend.hpp"
#include "validate/executor/executor.hpp"
#include "validate/executor/numerics.hpp"
#include "validate/torch/fsdp2_export.hpp"

namespace osdp::experiments {
namespace {

const char* kind_name(costmodel::OperatorKind k) {
  switch (k) {
    case costmodel::OperatorKind::kEmbedding:
      return "embedding";
    case costmodel::OperatorKind::kAttention:
      return "attention";
    case costmodel::OperatorKind::kMlp:
      return "mlp";
    case costmodel::OperatorKind::kProjection:
      return "projection";
    case costmodel::OperatorKind::kHead:
      return "head";
  }
  return "?";
}

template <typename T>
void write_raw(const std::string& path, const std::vector<T>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  if (!out) throw Error(fmt::format("cannot write {}", path));
}

}  // namespace

// What the torch job checks one step against. Both kinds get the executor's tokens and Adam; a model
// of osdp's own files (built as osdp.torch.GPT) also the executor's unsharded step (initial weights,
// gradients, updated weights); a transformers model is checked against itself unsharded, in the job.
nlohmann::json check_reference(const costmodel::Plan& plan, const std::string& dir, int index,
                               bool executor_step) {
  const costmodel::Workload w = costmodel::lower(plan.model);
  const int batch = plan.global_batch(plan.cluster.world_size());
  const validate::ExecutorOptions xo;
  const std::int64_t seq = plan.model.seq, vocab = plan.model.vocab;
  std::vector<std::int32_t> tokens;
  for (std::int64_t sample = 0; sample < batch; ++sample)
    for (std::int64_t t = 0; t <= seq; ++t) tokens.push_back(validate::token_of(sample, t, vocab));
  const std::string tokens_file = fmt::format("{}/reference-{}.tokens.i32", dir, index);
  write_raw(tokens_file, tokens);
  nlohmann::json check = {
      {"tokens_file", tokens_file},
      {"seq", seq},
      {"vocab", vocab},
      {"adam",
       {{"lr", xo.adam.lr}, {"beta1", xo.adam.beta1}, {"beta2", xo.adam.beta2}, {"eps", xo.adam.eps}}}};
  if (!executor_step) return check;
  const ReferenceStep ref = unsharded_step(plan.model, plan.cluster, batch, validate::GemmMath::kFp32);
  std::vector<float> blob;
  for (const auto* part : {&ref.initial, &ref.weights, &ref.grads})
    for (const auto& v : *part) blob.insert(blob.end(), v.begin(), v.end());
  const std::string weights_file = fmt::format("{}/reference-{}.f32", dir, index);
  write_raw(weights_file, blob);
  nlohmann::json ops = nlohmann::json::array();
  std::int64_t offset = 0;
  for (const auto& op : w.operators) {
    nlohmann::json ws = nlohmann::json::array();
    for (const auto& x : op.weights)
      ws.push_back({{"name", x.name}, {"rows", x.rows}, {"cols", x.cols}, {"matrix", x.rows > 1}});
    ops.push_back({{"name", op.name},
                   {"kind", kind_name(op.kind)},
                   {"hidden", op.hidden},
                   {"heads", op.kind == costmodel::OperatorKind::kAttention ? op.split_units : 1},
                   {"tied", op.tied_gradient},
                   {"offset", offset},
                   {"parameters", op.parameters()},
                   {"weights", ws}});
    offset += op.parameters();
  }
  check["weights_file"] = weights_file;
  check["parameters"] = offset;
  check["loss"] = ref.loss;
  check["operators"] = std::move(ops);
  return check;
}

GroupRunner torch_group_runner(const validate::TorchJobOptions& options,
                               std::shared_ptr<nlohmann::json> ran) {
  return [options, ran](const std::vector<ExternalPlan>& plans, const ValidationSpec& spec) {
    const validate::NameMapping mapping = validate::default_name_mapping();
    const validate::ScratchDir scratch;  // the references, for as long as the job runs
    nlohmann::json list = nlohmann::json::array();
    for (std::size_t i = 0; i < plans.size(); ++i) {
      const ExternalPlan& p = plans[i];
      nlohmann::json entry = {{"label", p.label},
                              {"export", validate::export_fsdp2(*p.plan, p.origin, mapping)}};
      // Mixed precision computes in bf16: no fp32 equality to check.
      if (options.check && p.plan->model.precision == costmodel::Precision::kFp32)
        entry["check"] = check_reference(*p.plan, scratch.path(), static_cast<int>(i),
                                         validate::transformers_model_type(p.plan->model).empty());
      list.push_back(std::move(entry));
    }
    const nlohmann::json job = {{"kind", "validate"},
                                {"warmup", spec.warmup},
                                {"iterations", spec.iterations},
                                {"seed", 0},
                                {"plans", list}};
    validate::TorchJobOptions o = options;
    o.nproc = plans.front().plan->cluster.world_size();
    const nlohmann::json out = validate::run_torch_job(job, o);
    if (ran)
      for (const char* key : {"torch", "backend", "device", "threads"})
        if (out.contains(key)) (*ran)[key] = out[key];
    std::vector<ExternalResult> results;
    try {
      for (const auto& r : out.at("plans")) {
        ExternalResult x;
        x.steps_s = r.at("steps_s").get<std::vector<double>>();
        x.loss = r.at("loss").get<double>();
        x.param_bytes = r.at("param_bytes").get<double>();
        x.grad_bytes = r.at("grad_bytes").get<double>();
        x.optimizer_bytes = r.at("optimizer_bytes").get<double>();
        if (const auto c = r.find("check"); c != r.end()) {
          x.check_loss_error = c->at("loss_error").get<double>();
          x.check_grad_diff = c->at("grad_diff").get<double>();
          x.check_weight_diff = c->at("weight_diff").get<double>();
          x.check_note =
              fmt::format("largest gradient difference in {}, largest weight difference in {}",
                          c->at("grad_op").get<std::string>(), c->at("weight_op").get<std::string>());
        }
        results.push_back(std::move(x));
      }
    } catch (const nlohmann::json::exception& e) {
      throw validate::BackendFailure(
          fmt::format("the torch job's result is not what osdp expects: {}", e.what()));
    }
    return results;
  };
}

}  // namespace osdp::experiments
