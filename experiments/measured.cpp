#include "experiments/measured.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "costmodel/calibration_fit.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/error.hpp"
#include "costmodel/files.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/units.hpp"
#include "experiments/numerics_check.hpp"
#include "experiments/results_dir.hpp"
#include "experiments/sweep.hpp"
#include "search/report.hpp"
#include "sim/replay.hpp"
#include "validate/executor/executor.hpp"
#include "validate/job_status.hpp"

namespace osdp::experiments {
namespace {

// A rank's tasks in the last timed step beside the simulator's: where a prediction goes wrong. A
// symmetric replay simulates one period of ranks; rank r is then predicted as rank r mod period.
void write_task_csv(const std::string& path, const sim::Replay& replay,
                    const std::vector<validate::TaskTiming>& measured, int rank) {
  const int simulated = std::max(replay.result.ranks_simulated, 1);
  std::vector<double> predicted(replay.schedule.tasks.size(), 0.0);
  for (const auto& rec : replay.result.tasks)
    if (rec.rank == rank % simulated)
      predicted[static_cast<std::size_t>(rec.task)] = sim::to_seconds(rec.end - rec.start);
  // The rank runs its stage's tasks; the measured times are of those, in order.
  const int first = replay.schedule.first_task(replay.schedule.stage_of(rank));
  std::string csv = "task,kind,stream,op,slice,micro_batch,predicted_s,measured_s,measured_start_s\n";
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const std::size_t t = static_cast<std::size_t>(first) + i;
    const sim::Task& task = replay.schedule.tasks[t];
    csv += fmt::format("{},{},{},{},{},{},{:.6g},{:.6g},{:.6g}\n", csv_field(task.name),
                       sim::to_string(task.kind), sim::to_string(task.stream), task.op, task.slice,
                       task.micro_batch, predicted[t], measured[i].end_s - measured[i].start_s,
                       measured[i].start_s);
  }
  costmodel::write_file_atomic(path, csv);
}

// An item made ready to run: the row so far, and (when a plan fits) the plan and its lowering.
struct Prepared {
  UnitResult row;
  std::optional<costmodel::Plan> plan;
  costmodel::Workload workload;
};

Prepared prepare(const MeasuredItem& item, const ValidationOptions& o) {
  Prepared p;
  UnitResult& r = p.row;
  if (item.unit) {  // searched, as the sweep does
    PlannedUnit u = plan_unit(*item.unit, o.calibration, o.selective);
    p.row = unit_row(*item.unit, u);
    if (u.outcome().feasible) {
      p.plan = u.outcome().plan;
      p.workload = *u.outcome().workload;
    }
  } else {  // a plan file, as it is
    const costmodel::Plan& plan = *item.plan;
    r.model = plan.model.name;
    r.cluster = plan.cluster.name;
    r.world_size = plan.cluster.world_size();
    r.memory_limit_bytes = plan.memory_limit_bytes;
    r.feasible = true;
    r.batch_size = plan.batch_size;
    r.pp = plan.pp;
    r.micro_batches = plan.micro_batches;
    r.global_batch = plan.global_batch(r.world_size);
    p.plan = plan;
    p.workload = costmodel::lower(plan.model, plan.pp);
    r.plan_summary = plan_summary(p.workload, plan.choices);
    if (!plan.data_parallel()) r.plan_summary += "; layout: " + plan.layout_summary();
  }
  r.index = item.index;
  r.key = item.key;
  r.strategy = item.label;
  return p;
}

// One plan being measured: its prediction, and (when a plan fits) its device and executor.
class Running {
 public:
  Running(const MeasuredItem& item, Prepared prepared, validate::Communicator& comm,
          const DeviceFactory& make_device, const ValidationOptions& o)
      : item_(item), comm_(comm), o_(o), row_(std::move(prepared.row)) {
    measurement_.group = item.group;
    if (!prepared.plan) {
      for (const auto& ev : evaluators()) row_.evaluations.push_back({ev.kind, false, 0, 0, 0, {}, {}});
      return;
    }
    plan_ = std::move(*prepared.plan);
    workload_ = std::move(prepared.workload);
    measurement_.prefetch = plan_.prefetch;
    measurement_.emulated = o.emulate_compute;
    if (o.emulate_compute) {  // a wait is not slowed by the communication beside it
      plan_.cluster.overlap.interference = 1.0;
      if (plan_.calibration && plan_.calibration->interference) plan_.calibration->interference = 1.0;
    }
    sim::SimOptions so;
    so.record_tasks = o.tasks;
    replay_ = sim::replay_plan(plan_, workload_, so);
    const double global_batch = plan_.global_batch(plan_.cluster.world_size());
    const double sim_time = sim::to_seconds(replay_.result.iteration);
    const double sim_peak = replay_.result.peak_rank().peak_bytes;
    row_.evaluations.push_back({EvaluatorKind::kAnalytic,
                                true,
                                global_batch / replay_.analytic_time_s,
                                replay_.analytic_time_s,
                                replay_.analytic_peak_bytes,
                                {},
                                {}});
    row_.evaluations.push_back(
        {EvaluatorKind::kSim, true, global_batch / sim_time, sim_time, sim_peak, {}, {}});
    if (comm.rank() == 0 && o.draws > 0) {  // rank 0 writes the rows
      row_.evaluations.end()[-2].interval =
          costmodel::central_interval(costmodel::drawn_step_times(workload_, plan_, o.draws));
      sim::SimOptions fast;
      fast.symmetric = plan_.data_parallel();
      fast.memory_rank = sim::SimOptions::kNoRanks;
      row_.evaluations.back().drawn_s = sim::simulated_step_times(plan_, workload_, o.draws, fast);
      row_.evaluations.back().interval = costmodel::central_interval(row_.evaluations.back().drawn_s);
    }
    measurement_.predicted_peak_bytes = sim_peak - replay_.result.reserve_bytes;
    if (o.run_group) {  // run elsewhere: memory is compared at rest
      measurement_.predicted_state_bytes = states_at_rest_bytes(plan_, workload_);
      return;
    }
    dev_ = make_device(plan_);
    validate::ExecutorOptions xo;
    xo.record_tasks = o.tasks;
    xo.gemm_math = o.gemm_math;
    xo.emulate_compute = o.emulate_compute;
    naming_the_plan([&] {
      executor_ = std::make_unique<validate::Executor>(*dev_, comm, workload_, plan_, replay_.schedule, xo);
    });
    if (o.check && !plan_.data_parallel() && o.emulate_compute && comm.rank() == 0 && o.progress)
      o.progress(fmt::format("{}: no check against the unsharded step: compute emulated", item.origin));
    if (o.check && !plan_.data_parallel() && !o.emulate_compute) {  // numerics_check.hpp
      if (comm.rank() == 0 && o.progress)
        o.progress(fmt::format("{}: one step against the unsharded step of batch {}", item.origin,
                               plan_.global_batch(plan_.cluster.world_size())));
      StepCheck c;
      naming_the_plan([&] { c = check_step(*executor_, plan_, workload_, comm, o.gemm_math); });
      measurement_.check_loss_error = c.loss_error;
      measurement_.check_grad_diff = c.grad_diff;
      measurement_.check_weight_diff = c.weight_diff;
      measurement_.check_note = c.note;
    }
    // The warm-up and timed steps run Adam at a learning rate of 1e-6 (the check above, at the
    // default 1e-3, compares one step with the unsharded one): the kernels and their sizes are the
    // same at any rate, and at 1e-3 the executor's arithmetic (no norms, numerics.hpp) diverges within
    // a few steps on a deep model, so a GPU would time Inf and NaN (a 48-layer GPT's rows on an H200
    // recorded a NaN loss). The recorded loss is the last timed step's, near the first step's.
    executor_->set_learning_rate(1e-6f);
  }

  bool feasible() const { return row_.feasible; }
  const std::string& label() const { return item_.label; }
  ExternalPlan external() const { return {&plan_, item_.label, item_.origin}; }
  void set_external(const ExternalResult& r) {
    measurement_.steps_s = r.steps_s;
    measurement_.loss = r.loss;
    measurement_.state_bytes = r.param_bytes + r.grad_bytes + r.optimizer_bytes;
    measurement_.check_loss_error = r.check_loss_error;
    measurement_.check_grad_diff = r.check_grad_diff;
    measurement_.check_weight_diff = r.check_weight_diff;
    measurement_.check_note = r.check_note;
  }
  int batch_size() const { return plan_.batch_size; }
  void warm_up() {
    naming_the_plan([&] { executor_->step(); });
  }
  void timed_step() {
    naming_the_plan([&] { last_ = executor_->step(); });
    measurement_.steps_s.push_back(comm_.max_over_ranks(last_.seconds));
    peak_ = std::max(peak_, static_cast<double>(last_.peak_bytes - last_.baseline_bytes));
  }

  // A device out of memory says which buffer (operator) and how many bytes; this adds the plan.
  template <typename F>
  void naming_the_plan(F&& work) {
    try {
      work();
    } catch (const validate::OutOfMemory& e) {
      throw validate::OutOfMemory(fmt::format("plan {} of {} ({}, micro-batch {}, {}): {}", row_.strategy,
                                              item_.origin, row_.model, plan_.batch_size, row_.plan_summary,
                                              e.what()));
    }
  }

  UnitResult finish() {
    Measurement& m = measurement_;
    if (!row_.feasible) {
      row_.measurement = std::move(m);
      return row_;
    }
    if (o_.run_group) {  // run elsewhere (the torch backend): memory at rest, no peak
      if (m.steps_s.empty())
        throw validate::BackendFailure(
            fmt::format("plan {} of {}: the backend returned no timed steps", row_.strategy, item_.origin));
      m.memory_error = (m.state_bytes - m.predicted_state_bytes) / m.predicted_state_bytes;
    } else {
      finish_executor();
    }
    const double time = costmodel::median(m.steps_s);
    m.min_s = *std::min_element(m.steps_s.begin(), m.steps_s.end());
    m.max_s = *std::max_element(m.steps_s.begin(), m.steps_s.end());
    const Evaluation& sim = row_.evaluations.back();
    m.time_error = (time - sim.time_s) / sim.time_s;
    // Counted as the other evaluators count peaks: the cluster's reserve included (the torch backend
    // measures no peak: the simulator's).
    const double peak =
        o_.run_group ? sim.peak_bytes : m.peak_bytes + (sim.peak_bytes - m.predicted_peak_bytes);
    row_.evaluations.push_back(
        {EvaluatorKind::kMeasured, true, sim.throughput * sim.time_s / time, time, peak, {}, {}});
    row_.measurement = std::move(measurement_);
    return row_;
  }

 private:
  // The executor's figures of the plan (peak, padding, the driver's view, loss, the task files), then
  // its device and executor released.
  void finish_executor() {
    Measurement& m = measurement_;
    m.peak_bytes = comm_.max_over_ranks(peak_);
    m.baseline_bytes = static_cast<double>(last_.baseline_bytes);
    m.padding_bytes = static_cast<double>(last_.padding_bytes);
    // The driver's view (GPUs; 0 on the CPU): the least free memory of any rank, the first's total.
    m.device_free_bytes = -comm_.max_over_ranks(-static_cast<double>(last_.device_free_bytes));
    m.device_total_bytes = static_cast<double>(last_.device_total_bytes);
    m.loss = m.emulated ? std::nan("") : last_.loss;  // emulated compute computes no loss
    if (o_.tasks) {                                   // rank 0: UNIT.csv; rank r > 0: UNIT.rankR.csv
      if (comm_.rank() == 0) std::filesystem::create_directories(o_.out_dir + "/tasks");
      comm_.barrier("task files");
      const std::string rank_suffix = comm_.rank() == 0 ? "" : fmt::format(".rank{}", comm_.rank());
      write_task_csv(fmt::format("{}/tasks/{}-{}-b{}{}.csv", o_.out_dir, row_.index, row_.strategy,
                                 plan_.batch_size, rank_suffix),
                     replay_, last_.tasks, comm_.rank());
    }
    executor_.reset();
    dev_.reset();
    m.memory_error = (m.peak_bytes - m.predicted_peak_bytes) / m.predicted_peak_bytes;
  }

  const MeasuredItem& item_;
  validate::Communicator& comm_;
  const ValidationOptions& o_;
  UnitResult row_;
  Measurement measurement_;
  costmodel::Plan plan_;
  costmodel::Workload workload_;
  sim::Replay replay_;
  std::unique_ptr<validate::Device> dev_;
  std::unique_ptr<validate::Executor> executor_;
  validate::StepStats last_;
  double peak_ = 0;
};

// Rank 0 opens the results directory and reads back what is done; every rank learns whether that
// worked (the others throw too, silently: rank 0 reports).
std::map<std::string, UnitResult> open_results(const MeasuredJob& job, const ValidationOptions& o,
                                               validate::Communicator& comm,
                                               std::unique_ptr<ResultsDir>& dir) {
  std::map<std::string, UnitResult> done;
  std::exception_ptr error;
  if (comm.rank() == 0) {
    try {
      dir = std::make_unique<ResultsDir>(
          o.out_dir, ResultsDirOptions{
                         o.resume, o.force, {"validation.csv", "summary.json", "predicted_vs_measured.png"}});
      if (dir->resuming()) {
        std::vector<std::string> keys(job.items.size());
        for (const auto& item : job.items) keys[static_cast<std::size_t>(item.index)] = item.key;
        const StoredRows stored = read_rows(dir->rows_path(), keys, measured_evaluators());
        std::vector<std::string> kept;  // torn or stale lines go before new ones are appended
        for (const auto& [index, r] : stored.rows) {
          kept.push_back(to_json(r).dump());
          done.emplace(r.key, r);
        }
        dir->keep(kept);
      }
    } catch (const Error&) {
      error = std::current_exception();
    }
  }
  const bool failed = comm.all_values(error ? 1.0 : 0.0).front() > 0;
  if (error) std::rethrow_exception(error);
  if (failed) throw UsageError("rank 0 could not open the results directory");
  return done;
}

}  // namespace

double states_at_rest_bytes(const costmodel::Plan& plan, const costmodel::Workload& workload) {
  const costmodel::PrecisionBytes b = costmodel::precision_bytes(plan.model.precision);
  const std::int64_t world = plan.cluster.world_size(), node = plan.cluster.devices_per_node;
  double total = 0;
  for (std::size_t i = 0; i < workload.operators.size() && i < plan.choices.size(); ++i) {
    const std::int64_t p = workload.operators[i].parameters();
    const costmodel::Choice& c = plan.choices[i];
    const std::int64_t ranks = c.replicate ? 1 : c.node_group ? node : world;
    total += static_cast<double>(b.at_rest()) * static_cast<double>((p + ranks - 1) / ranks);
  }
  return total;
}

const std::vector<EvaluatorKind>& measured_evaluators() {
  static const std::vector<EvaluatorKind> k{EvaluatorKind::kAnalytic, EvaluatorKind::kSim,
                                            EvaluatorKind::kMeasured};
  return k;
}

std::vector<UnitResult> run_measured(const MeasuredJob& job, validate::Communicator& comm,
                                     const DeviceFactory& make_device, const ValidationOptions& o) {
  if (!o.run_group) check_world_size(job, comm.size());  // else each group's own job has its ranks
  if (!o.selective)                                      // osdp's executor runs none or full checkpointing
    for (const auto& item : job.items) {
      if (!item.plan) continue;
      const costmodel::Workload w = costmodel::lower(item.plan->model, item.plan->pp);
      for (std::size_t u = 0; u < w.operators.size(); ++u)
        if (w.operators[u].recompute(item.plan->choices[u]) == costmodel::Recompute::kSelective)
          throw UsageError(fmt::format(
              "{}: {} is checkpointed selectively; osdp's executor runs none or full checkpointing (run "
              "selective plans with --backend torch)",
              item.origin, w.operators[u].name));
    }
  const bool root = comm.rank() == 0;
  std::unique_ptr<ResultsDir> dir;
  const std::map<std::string, UnitResult> done = open_results(job, o, comm, dir);
  const std::size_t total = job.items.size();
  std::vector<UnitResult> rows;
  // Where a plan's wall time went, for the progress line: planning and pricing (its intervals' draws
  // included), setting up (the device, the executor, its initial weights), each step phase of its group,
  // and finishing (the numerics check where there is one).
  struct Walls {
    double plan = 0, set_up = 0, warm_up = 0, timed = 0, finish = 0;
  };
  const auto since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto report = [&](const UnitResult& row, std::size_t position, const Walls& wall) {
    if (!root) return;
    dir->append(to_json(row).dump());
    if (!o.progress) return;
    const Evaluation* sim = row.evaluation(EvaluatorKind::kSim);
    const Evaluation* measured = row.evaluation(EvaluatorKind::kMeasured);
    const auto& m = row.measurement;
    const bool at_rest = m && m->state_bytes > 0;
    o.progress(
        row.feasible && m
            ? fmt::format(
                  "[{}/{}] {} {} b={}: predicted {:.1f} ms, measured {:.1f} ms ({:+.1f}%); {} {} "
                  "predicted, {} measured ({:+.2f}%)",
                  position, total, row.model, row.strategy, row.batch_size, 1e3 * sim->time_s,
                  1e3 * measured->time_s, 100 * m->time_error, at_rest ? "states at rest" : "peak",
                  costmodel::format_bytes(at_rest ? m->predicted_state_bytes : m->predicted_peak_bytes),
                  costmodel::format_bytes(at_rest ? m->state_bytes : m->peak_bytes), 100 * m->memory_error) +
                  fmt::format("; wall {:.1f} s (plan {:.1f}, set-up {:.1f}, steps {:.1f}, finish {:.1f})",
                              wall.plan + wall.set_up + wall.warm_up + wall.timed + wall.finish, wall.plan,
                              wall.set_up, wall.warm_up + wall.timed, wall.finish)
            : fmt::format("[{}/{}] {} {}: no plan fits", position, total, row.model, row.strategy));
  };
  // The plans of one group run side by side, their steps interleaved, so that a machine whose speed
  // drifts (a shared host) slows them alike and their comparison holds.
  for (std::size_t first = 0; first < total;) {
    std::size_t last = first;
    while (last < total && job.items[last].group == job.items[first].group) ++last;
    if (o.one_at_a_time) last = first + 1;
    const bool new_group = first == 0 || job.items[first - 1].group != job.items[first].group;
    if (o.group_delay_ms > 0 && new_group)
      std::this_thread::sleep_for(std::chrono::milliseconds(o.group_delay_ms));
    std::vector<std::unique_ptr<Running>> group;
    std::vector<std::size_t> positions;
    std::vector<Walls> walls;
    for (std::size_t i = first; i < last; ++i) {
      const MeasuredItem& item = job.items[i];
      // Rank 0 decides (it holds the results): every rank skips the same items.
      const auto finished = done.find(item.key);
      const bool skip = comm.all_values(root && finished != done.end() ? 1.0 : 0.0).front() > 0;
      if (skip) {
        if (root) rows.push_back(finished->second);
        continue;
      }
      const auto t_plan = std::chrono::steady_clock::now();
      Prepared p = prepare(item, o);
      Walls wall;
      wall.plan = since(t_plan);
      if (root && o.progress && p.plan)
        o.progress(fmt::format("[{}/{}] {} {} b={}: running {} + {} steps", i + 1, total, p.row.model,
                               item.label, p.plan->batch_size, job.validation.warmup,
                               job.validation.iterations));
      const auto t_set_up = std::chrono::steady_clock::now();
      group.push_back(std::make_unique<Running>(item, std::move(p), comm, make_device, o));
      wall.set_up = since(t_set_up);
      positions.push_back(i + 1);
      walls.push_back(wall);
    }
    // Each step says where it is in the rank's status file, for a job that ends without osdp's word.
    auto at = [&](std::size_t g, const char* kind, int k, int of) {
      validate::job_status_context(fmt::format("plan {} of {} ({} b={}), {} step {} of {}", positions[g],
                                               total, group[g]->label(), group[g]->batch_size(), kind, k + 1,
                                               of));
    };
    if (o.run_group) {
      std::vector<ExternalPlan> plans;
      std::vector<std::size_t> which;
      for (std::size_t g = 0; g < group.size(); ++g)
        if (group[g]->feasible()) {
          plans.push_back(group[g]->external());
          which.push_back(g);
        }
      if (!plans.empty()) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::vector<ExternalResult> results = o.run_group(plans, job.validation);
        for (const std::size_t g : which)  // the backend ran them together: each its share
          walls[g].timed = since(t0) / static_cast<double>(which.size());
        if (results.size() != plans.size())
          throw validate::BackendFailure(
              fmt::format("the backend returned {} results for {} plans", results.size(), plans.size()));
        for (std::size_t i = 0; i < which.size(); ++i) group[which[i]]->set_external(results[i]);
      }
    }
    for (int k = 0; k < (o.run_group ? 0 : job.validation.warmup); ++k)
      for (std::size_t g = 0; g < group.size(); ++g)
        if (group[g]->feasible()) {
          at(g, "warm-up", k, job.validation.warmup);
          const auto t0 = std::chrono::steady_clock::now();
          group[g]->warm_up();
          walls[g].warm_up += since(t0);
        }
    for (int k = 0; k < (o.run_group ? 0 : job.validation.iterations); ++k)
      for (std::size_t g = 0; g < group.size(); ++g)
        if (group[g]->feasible()) {
          at(g, "timed", k, job.validation.iterations);
          const auto t0 = std::chrono::steady_clock::now();
          group[g]->timed_step();
          walls[g].timed += since(t0);
        }
    for (std::size_t g = 0; g < group.size(); ++g) {
      const auto t_finish = std::chrono::steady_clock::now();
      UnitResult row = group[g]->finish();
      walls[g].finish = since(t_finish);
      report(row, positions[g], walls[g]);
      if (root) rows.push_back(std::move(row));
    }
    first = last;
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  return rows;
}

}  // namespace osdp::experiments
