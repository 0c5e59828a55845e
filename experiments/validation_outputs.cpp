// The verdict and the files of `osdp validate`: the tolerances checked over the measured rows,
// validation.csv, summary.json and the predicted-against-measured plot (experiments/measured.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>

#include <fmt/format.h>

#include "costmodel/calibration_fit.hpp"
#include "costmodel/error.hpp"
#include "costmodel/files.hpp"
#include "experiments/measured.hpp"
#include "experiments/probes.hpp"
#include "experiments/sweep.hpp"

#ifndef OSDP_PLOT_SCRIPT
#define OSDP_PLOT_SCRIPT ""
#endif

namespace osdp::experiments {
namespace {

// The figures of one measured row, flat, as validation.csv and summary.json list them.
struct Flat {
  double analytic_time_s = 0, predicted_time_s = 0, measured_time_s = 0;
  Measurement m;
};

Flat flat(const UnitResult& r) {
  Flat f;
  if (r.measurement) f.m = *r.measurement;
  if (!r.feasible) return f;
  if (const Evaluation* e = r.evaluation(EvaluatorKind::kAnalytic)) f.analytic_time_s = e->time_s;
  if (const Evaluation* e = r.evaluation(EvaluatorKind::kSim)) f.predicted_time_s = e->time_s;
  if (const Evaluation* e = r.evaluation(EvaluatorKind::kMeasured)) f.measured_time_s = e->time_s;
  return f;
}

// A measured row's step time by one evaluator (every feasible measured row has all three).
// The simulated prediction's interval (unknown when the row has none).
costmodel::Interval interval_of(const UnitResult& r) {
  const Evaluation* e = r.evaluation(EvaluatorKind::kSim);
  return e ? e->interval : costmodel::Interval{};
}

// The 90% interval of b's predicted step over a's, draw by draw (unknown unless both rows have the
// same draws).
costmodel::Interval drawn_ratio(const UnitResult& a, const UnitResult& b) {
  const Evaluation* ea = a.evaluation(EvaluatorKind::kSim);
  const Evaluation* eb = b.evaluation(EvaluatorKind::kSim);
  if (!ea || !eb) return {};
  return costmodel::ratio_interval(eb->drawn_s, ea->drawn_s);
}

double time_of(const UnitResult& r, EvaluatorKind k) {
  const Evaluation* e = r.evaluation(k);
  if (e == nullptr)
    throw Error(fmt::format("row {} ({}) has no \"{}\" evaluation", r.index, r.strategy, to_string(k)));
  return e->time_s;
}

// A group is a configuration's JSON (experiments) or a plain name ("plan files").
nlohmann::json group_json(const std::string& group) {
  if (!group.empty() && group.front() == '{') return nlohmann::json::parse(group);
  return group;
}

nlohmann::json row_json(const UnitResult& r) {
  const Flat f = flat(r);
  return {{"index", r.index},
          {"key", r.key},
          {"config", f.m.group},
          {"model", r.model},
          {"strategy", r.strategy},
          {"plan_summary", r.plan_summary},
          {"world_size", r.world_size},
          {"batch_size", r.batch_size},
          {"pp", r.pp},
          {"micro_batches", r.micro_batches},
          {"global_batch", r.global_batch},
          {"prefetch", f.m.prefetch},
          {"memory_limit_bytes", r.memory_limit_bytes},
          {"feasible", r.feasible},
          {"analytic_time_s", f.analytic_time_s},
          {"predicted_time_s", f.predicted_time_s},
          {"predicted_interval_s", costmodel::to_json(interval_of(r))},
          {"measured_time_s", f.measured_time_s},
          {"measured_min_s", f.m.min_s},
          {"measured_max_s", f.m.max_s},
          {"steps_s", f.m.steps_s},
          {"predicted_peak_bytes", f.m.predicted_peak_bytes},
          {"measured_peak_bytes", f.m.peak_bytes},
          {"baseline_bytes", f.m.baseline_bytes},
          {"padding_bytes", f.m.padding_bytes},
          {"device_free_bytes", f.m.device_free_bytes},
          {"device_total_bytes", f.m.device_total_bytes},
          {"time_error", f.m.time_error},
          {"memory_error", f.m.memory_error},
          {"predicted_state_bytes", f.m.predicted_state_bytes},
          {"measured_state_bytes", f.m.state_bytes},
          {"check_loss_error", f.m.check_loss_error},
          {"check_grad_diff", f.m.check_grad_diff},
          {"check_weight_diff", f.m.check_weight_diff},
          {"loss", f.m.loss},
          {"compute", f.m.emulated ? "emulated" : "real"}};
}

// Resamples per measured ratio: with 100 draws, 20,000 sums per pair.
constexpr int kResamples = 200;

}  // namespace

std::optional<RatioCoverage> ratio_coverage(const UnitResult& a, const UnitResult& b) {
  const Evaluation* ea = a.evaluation(EvaluatorKind::kSim);
  const Evaluation* eb = b.evaluation(EvaluatorKind::kSim);
  if (!ea || !eb || !a.measurement || !b.measurement) return std::nullopt;
  const std::vector<double>&da = ea->drawn_s, &db = eb->drawn_s;
  const std::vector<double>&sa = a.measurement->steps_s, &sb = b.measurement->steps_s;
  const std::size_t steps = std::min(sa.size(), sb.size());
  if (da.size() < 2 || da.size() != db.size() || steps == 0) return std::nullopt;
  RatioCoverage x;
  x.a = a.strategy;
  x.b = b.strategy;
  x.group = a.measurement->group;
  x.measured = time_of(b, EvaluatorKind::kMeasured) / time_of(a, EvaluatorKind::kMeasured);
  x.predicted = time_of(b, EvaluatorKind::kSim) / time_of(a, EvaluatorKind::kSim);
  const costmodel::Interval drawn = drawn_ratio(a, b);
  if (!drawn.known() || !(x.measured > 0)) return std::nullopt;
  x.low = drawn.low;
  x.high = drawn.high;
  x.inside_drawn = drawn.contains(x.measured);
  // The measured ratio's own spread: the steps resampled in pairs, each resample's ratio of medians
  // over the measured ratio (in logs). Pairs keep the pace that plans run side by side share; for
  // plans run one after the other (GPUs) they are independent samples, resampled alike.
  std::mt19937_64 rng(0x5eedULL ^ (static_cast<std::uint64_t>(a.index) << 32) ^
                      static_cast<std::uint64_t>(b.index));
  std::uniform_int_distribution<std::size_t> pick(0, steps - 1);
  std::vector<double> noise, ra(steps), rb(steps);
  noise.reserve(kResamples);
  for (int k = 0; k < kResamples; ++k) {
    for (std::size_t i = 0; i < steps; ++i) {
      const std::size_t j = pick(rng);
      ra[i] = sa[j];
      rb[i] = sb[j];
    }
    const double ma = costmodel::median(ra), mb = costmodel::median(rb);
    if (ma > 0 && mb > 0) noise.push_back(std::log(mb / ma / x.measured));
  }
  if (noise.empty()) noise.push_back(0.0);
  std::vector<double> sums;
  sums.reserve(da.size() * noise.size());
  for (std::size_t d = 0; d < da.size(); ++d) {
    if (!(da[d] > 0) || !(db[d] > 0)) continue;
    const double l = std::log(db[d] / da[d]);
    for (double e : noise) sums.push_back(l + e);
  }
  const costmodel::Interval both = costmodel::central_interval(sums);
  if (!both.known()) return std::nullopt;
  x.noise_low = std::exp(both.low);
  x.noise_high = std::exp(both.high);
  x.inside = x.measured >= x.noise_low && x.measured <= x.noise_high;
  return x;
}

double ValidationSummary::ratio_reach() const {
  std::vector<double> reach;
  for (const auto& x : ratios) reach.push_back(std::sqrt(x.high / x.low) - 1);
  return reach.empty() ? 0.0 : costmodel::median(reach);
}

int ValidationSummary::ratios_inside(bool drawn_alone) const {
  return static_cast<int>(std::count_if(ratios.begin(), ratios.end(), [drawn_alone](const RatioCoverage& x) {
    return drawn_alone ? x.inside_drawn : x.inside;
  }));
}

namespace {

// Fewer draws than this say too little of a count's percentiles.
constexpr std::size_t kMinCoverageDraws = 20;

// ValidationSummary::expected_coverage over the rows with an interval (see there).
std::optional<ValidationSummary::ExpectedCoverage> expected_coverage(const std::vector<UnitResult>& rows) {
  struct Plan {
    const std::vector<double>* drawn;
    const std::vector<double>* steps;
    double median = 0;
    costmodel::Interval interval;
    std::string group;
  };
  std::vector<Plan> plans;
  std::map<std::string, std::size_t> group_steps;  // the most timed steps of a plan of the group
  for (const auto& r : rows) {
    const Evaluation* sim = r.evaluation(EvaluatorKind::kSim);
    if (!r.feasible || !r.measurement || !sim || !sim->interval.known()) continue;
    const Measurement& m = *r.measurement;
    if (m.steps_s.empty()) return std::nullopt;
    plans.push_back({&sim->drawn_s, &m.steps_s, costmodel::median(m.steps_s), sim->interval, m.group});
    group_steps[m.group] = std::max(group_steps[m.group], m.steps_s.size());
  }
  if (plans.empty()) return std::nullopt;
  const std::size_t draws = plans.front().drawn->size();
  for (const auto& p : plans)
    if (p.drawn->size() != draws || draws < kMinCoverageDraws || !(p.median > 0)) return std::nullopt;
  std::mt19937_64 rng(0xc0ffeeULL);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::map<std::string, std::vector<double>> picks;  // per group, this draw's resampling positions
  std::vector<int> counts(draws);
  std::vector<double> resampled;
  for (std::size_t d = 0; d < draws; ++d) {
    for (const auto& [group, steps] : group_steps) {
      auto& u = picks[group];
      u.resize(steps);
      for (double& x : u) x = unit(rng);
    }
    for (const auto& p : plans) {
      const std::vector<double>& u = picks[p.group];
      const std::size_t m = p.steps->size();
      resampled.resize(m);
      for (std::size_t i = 0; i < m; ++i)
        resampled[i] = (*p.steps)[std::min(m - 1, static_cast<std::size_t>(u[i] * static_cast<double>(m)))];
      counts[d] += p.interval.contains((*p.drawn)[d] * costmodel::median(resampled) / p.median);
    }
  }
  std::sort(counts.begin(), counts.end());
  const double n = static_cast<double>(draws - 1);
  ValidationSummary::ExpectedCoverage x;
  x.draws = static_cast<int>(draws);
  x.low = counts[static_cast<std::size_t>(std::floor(0.05 * n))];
  x.median = counts[static_cast<std::size_t>(std::floor(0.5 * n))];
  x.high = counts[static_cast<std::size_t>(std::ceil(0.95 * n))];
  const double total = static_cast<double>(plans.size());
  x.in_band =
      static_cast<double>(std::count_if(
          counts.begin(), counts.end(),
          [total](int c) { return c >= kCoverageBand[0] * total && c <= kCoverageBand[1] * total; })) /
      static_cast<double>(draws);
  return x;
}

}  // namespace

ValidationSummary summarize(const std::vector<UnitResult>& rows, const ValidationSpec& spec) {
  ValidationSummary s;
  s.spread_tolerance = spec.time_median;
  std::vector<double> errs, spreads, lows, highs;
  for (const auto& r : rows) {
    if (!r.feasible || !r.measurement) continue;
    const Measurement& m = *r.measurement;
    ++s.plans;
    errs.push_back(std::fabs(m.time_error));
    const double med = m.steps_s.empty() ? 0.0 : costmodel::median(m.steps_s);
    spreads.push_back(med > 0 ? (m.max_s - m.min_s) / med : 0.0);
    s.max_abs_time_error = std::max(s.max_abs_time_error, std::fabs(m.time_error));
    if (const Evaluation* sim = r.evaluation(EvaluatorKind::kSim); sim && sim->interval.known()) {
      ++s.with_interval;
      if (sim->time_s > 0) {
        lows.push_back(sim->interval.low / sim->time_s - 1);
        highs.push_back(sim->interval.high / sim->time_s - 1);
      }
    }
    s.max_abs_memory_error = std::max(s.max_abs_memory_error, std::fabs(m.memory_error));
    if (std::fabs(m.time_error) > spec.time_max)
      s.failures.push_back(fmt::format("{} {} b={}: step time off by {:+.1f}% (tolerance {:.1f}%)", r.model,
                                       r.strategy, r.batch_size, 100 * m.time_error, 100 * spec.time_max));
    if (std::fabs(m.memory_error) > spec.memory_max) s.memory_failed = true;
    if (std::fabs(m.memory_error) > spec.memory_max)
      s.failures.push_back(fmt::format(
          "{} {} b={}: {} off by {:+.2f}% (tolerance {:.2f}%)", r.model, r.strategy, r.batch_size,
          m.state_bytes > 0 ? "memory at rest (parameters, gradients, optimizer states)" : "peak memory",
          100 * m.memory_error, 100 * spec.memory_max));
    if (m.check_loss_error >= 0) {
      ++s.checked;
      s.max_check_loss_error = std::max(s.max_check_loss_error, m.check_loss_error);
      s.max_check_grad_diff = std::max(s.max_check_grad_diff, m.check_grad_diff);
      s.max_check_weight_diff = std::max(s.max_check_weight_diff, m.check_weight_diff);
      if (m.check_loss_error > kCheckLoss || m.check_grad_diff > kCheckGrad ||
          m.check_weight_diff > kCheckWeight) {
        s.numerics_failed = true;
        s.failures.push_back(fmt::format(
            "{} {} b={}: one step in torch differs from the unsharded step: loss {:.2e} (tolerance {:.0e}), "
            "gradients {:.2e} ({:.0e}), weights {:.2e} ({:.0e}); {}",
            r.model, r.strategy, r.batch_size, m.check_loss_error, kCheckLoss, m.check_grad_diff, kCheckGrad,
            m.check_weight_diff, kCheckWeight, m.check_note));
      }
    }
  }
  s.median_abs_time_error = errs.empty() ? 0.0 : costmodel::median(errs);
  if (!lows.empty()) {
    s.interval_low = costmodel::median(lows);
    s.interval_high = costmodel::median(highs);
  }
  s.spread = spreads.empty() ? 0.0 : costmodel::median(spreads);
  if (s.plans > 0 && s.median_abs_time_error > spec.time_median)
    s.failures.push_back(fmt::format("median step-time error {:.1f}% (tolerance {:.1f}%)",
                                     100 * s.median_abs_time_error, 100 * spec.time_median));
  if (s.plans == 0) s.failures.push_back("no plan fits: nothing was measured");
  std::map<std::string, std::map<std::string, const UnitResult*>> by_group;
  for (const auto& r : rows)
    if (r.feasible && r.measurement) by_group[r.measurement->group][r.strategy] = &r;
  for (const auto& check : spec.speedups) {
    for (const auto& [group, strategies] : by_group) {
      auto f = strategies.find(check.faster), t = strategies.find(check.than);
      if (f == strategies.end() || t == strategies.end()) continue;
      SpeedupResult x;
      x.group = group;
      x.faster = check.faster;
      x.than = check.than;
      x.predicted = time_of(*t->second, EvaluatorKind::kSim) / time_of(*f->second, EvaluatorKind::kSim);
      x.measured =
          time_of(*t->second, EvaluatorKind::kMeasured) / time_of(*f->second, EvaluatorKind::kMeasured);
      x.error = x.measured / x.predicted - 1.0;
      x.ok = std::fabs(x.error) <= check.tolerance;
      if (!x.ok)
        s.failures.push_back(fmt::format(
            "speedup of {} over {} measured {:.3f}x, predicted {:.3f}x ({:+.1f}%, "
            "tolerance {:.1f}%) at {}",
            x.faster, x.than, x.measured, x.predicted, 100 * x.error, 100 * check.tolerance, group));
      s.speedups.push_back(x);
    }
  }
  // Every two plans of a configuration: the measured ratio against its drawn interval (RatioCoverage),
  // and the measured order of those predicted apart (OrderResult).
  for (const auto& [group, strategies] : by_group) {
    std::vector<const UnitResult*> plans;
    for (const auto& entry : strategies) plans.push_back(entry.second);
    for (std::size_t i = 0; i < plans.size(); ++i)
      for (std::size_t j = i + 1; j < plans.size(); ++j) {
        ++s.order_pairs;
        const UnitResult* a = plans[i];
        const UnitResult* b = plans[j];
        if (time_of(*a, EvaluatorKind::kSim) > time_of(*b, EvaluatorKind::kSim)) std::swap(a, b);
        if (auto x = ratio_coverage(*a, *b)) s.ratios.push_back(std::move(*x));
        const double pa = time_of(*a, EvaluatorKind::kSim), pb = time_of(*b, EvaluatorKind::kSim);
        auto spread = [](const Measurement& m) {
          const double med = costmodel::median(m.steps_s);
          return med > 0 ? (m.max_s - m.min_s) / med : 0.0;
        };
        OrderResult o;
        o.group = group;
        o.a = a->strategy;
        o.b = b->strategy;
        o.predicted_gap = pb / pa - 1.0;
        o.spread = std::max(spread(*a->measurement), spread(*b->measurement));
        const costmodel::Interval ia = interval_of(*a), ib = interval_of(*b);
        const costmodel::Interval ratio = drawn_ratio(*a, *b);
        o.by_interval = ratio.known() || (ia.known() && ib.known());
        // The model must be sure of the order (its draws or intervals), and the measurement must be able
        // to tell it: a gap within the steps' own spread is below what the run resolves.
        const bool sure = ratio.known() ? ratio.low > 1.0 : o.by_interval ? ia.high < ib.low : true;
        const bool apart = sure && o.predicted_gap > o.spread;
        if (!apart) continue;
        o.measured_a = time_of(*a, EvaluatorKind::kMeasured);
        o.measured_b = time_of(*b, EvaluatorKind::kMeasured);
        o.ok = o.measured_a < o.measured_b;
        if (!o.ok && spec.order)
          s.failures.push_back(fmt::format(
              "order: {} predicted {:.1f}% faster than {} ({}) but measured {:.1f} ms against {:.1f} ms at "
              "{}",
              o.a, 100 * o.predicted_gap, o.b,
              ratio.known()
                  ? fmt::format("{} / {} in 90% of draws {:.3f}-{:.3f}", o.b, o.a, ratio.low, ratio.high)
              : o.by_interval ? fmt::format("90% intervals {:.1f}-{:.1f} and {:.1f}-{:.1f} ms apart",
                                            1e3 * ia.low, 1e3 * ia.high, 1e3 * ib.low, 1e3 * ib.high)
                              : fmt::format("measured spread {:.1f}%", 100 * o.spread),
              1e3 * o.measured_a, 1e3 * o.measured_b, group));
        s.orders.push_back(o);
      }
  }
  if (nlohmann::json c = composition_fit(rows); c.value("dof", 0) > 0) s.composition = std::move(c);
  // The measured steps, each divided by `level`, inside their predictions' intervals.
  const auto inside = [&rows](double level) {
    int n = 0;
    for (const auto& r : rows) {
      const Evaluation* sim = r.evaluation(EvaluatorKind::kSim);
      const Evaluation* measured = r.evaluation(EvaluatorKind::kMeasured);
      if (r.feasible && r.measurement && sim && measured && sim->interval.known())
        n += sim->interval.contains(measured->time_s / level);
    }
    return n;
  };
  s.covered = inside(1.0);
  if (s.with_interval > 0 && !s.composition.is_null() && s.composition["level"].is_number())
    s.covered_about_level = inside(s.composition["level"].get<double>());
  s.expected_coverage = expected_coverage(rows);
  return s;
}

namespace {

// summary.json's "speedup_coverage": the counts and every pair (measured.hpp's RatioCoverage).
nlohmann::json ratio_coverage_json(const ValidationSummary& s) {
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& x : s.ratios)
    pairs.push_back({{"config", group_json(x.group)},
                     {"faster", x.a},
                     {"than", x.b},
                     {"predicted", x.predicted},
                     {"measured", x.measured},
                     {"interval", {x.low, x.high}},
                     {"interval_with_measurement", {x.noise_low, x.noise_high}},
                     {"inside", x.inside},
                     {"inside_drawn", x.inside_drawn}});
  return {{"level", costmodel::kIntervalLevel},
          {"pairs", s.ratios.size()},
          {"inside", s.ratios_inside()},
          {"inside_drawn", s.ratios_inside(true)},
          {"median_reach", s.ratios.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.ratio_reach())},
          {"ratios", pairs}};
}

}  // namespace

std::string write_validation_outputs(const std::string& dir, const MeasuredJob& job,
                                     const std::vector<UnitResult>& rows, const ValidationSummary& s,
                                     const nlohmann::json& provenance) {
  std::string csv =
      "index,model,strategy,world_size,memory_limit_bytes,feasible,batch_size,prefetch,analytic_time_s,"
      "predicted_time_s,measured_time_s,measured_min_s,measured_max_s,time_error,predicted_peak_bytes,"
      "measured_peak_bytes,baseline_bytes,padding_bytes,device_free_bytes,device_total_bytes,memory_error,"
      "predicted_state_bytes,measured_state_bytes,loss,plan,pp,micro_batches,global_batch,predicted_low_s,"
      "predicted_high_s,compute\n";
  for (const auto& r : rows) {
    const Flat f = flat(r);
    csv += fmt::format(
        "{},{},{},{},{:.0f},{},{},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.0f},{:.0f},{:.0f},{:.0f},"
        "{:.0f},{:.0f},{:.6g},{:.0f},{:.0f},{:.8g},{},{},{},{},{},{},{}\n",
        r.index, csv_field(r.model), csv_field(r.strategy), r.world_size, r.memory_limit_bytes,
        r.feasible ? "true" : "false", r.batch_size, f.m.prefetch, f.analytic_time_s, f.predicted_time_s,
        f.measured_time_s, f.m.min_s, f.m.max_s, f.m.time_error, f.m.predicted_peak_bytes, f.m.peak_bytes,
        f.m.baseline_bytes, f.m.padding_bytes, f.m.device_free_bytes, f.m.device_total_bytes,
        f.m.memory_error, f.m.predicted_state_bytes, f.m.state_bytes, f.m.loss, csv_field(r.plan_summary),
        r.pp, r.micro_batches, r.global_batch,
        interval_of(r).known() ? fmt::format("{:.6g}", interval_of(r).low) : "",
        interval_of(r).known() ? fmt::format("{:.6g}", interval_of(r).high) : "",
        f.m.emulated ? "emulated" : "real");
  }
  costmodel::write_file_atomic(dir + "/validation.csv", csv);

  nlohmann::json speedups = nlohmann::json::array();
  for (const auto& x : s.speedups)
    speedups.push_back({{"config", group_json(x.group)},
                        {"faster", x.faster},
                        {"than", x.than},
                        {"predicted", x.predicted},
                        {"measured", x.measured},
                        {"error", x.error},
                        {"ok", x.ok}});
  nlohmann::json orders = nlohmann::json::array();
  for (const auto& o : s.orders)
    orders.push_back({{"config", group_json(o.group)},
                      {"faster", o.a},
                      {"than", o.b},
                      {"predicted_gap", o.predicted_gap},
                      {"measured_spread", o.spread},
                      {"by_interval", o.by_interval},
                      {"measured_faster_s", o.measured_a},
                      {"measured_than_s", o.measured_b},
                      {"ok", o.ok}});
  nlohmann::json rows_json = nlohmann::json::array();
  for (const auto& r : rows) rows_json.push_back(row_json(r));
  const nlohmann::json summary = {
      {"kind", "osdp-validation"},
      {"schema_version", 1},
      {"experiment", job.source},
      {"provenance", provenance},
      {"tolerance",
       {{"time_median", job.validation.time_median},
        {"time_max", job.validation.time_max},
        {"memory_max", job.validation.memory_max}}},
      {"plans", s.plans},
      {"median_abs_time_error", s.median_abs_time_error},
      {"max_abs_time_error", s.max_abs_time_error},
      {"max_abs_memory_error", s.max_abs_memory_error},
      {"speedups", speedups},
      {"coverage",
       {{"level", costmodel::kIntervalLevel},
        {"plans", s.with_interval},
        {"inside", s.covered},
        {"fraction", s.with_interval > 0 ? nlohmann::json(s.coverage()) : nlohmann::json(nullptr)},
        {"median_low", s.with_interval > 0 ? nlohmann::json(s.interval_low) : nlohmann::json(nullptr)},
        {"median_high", s.with_interval > 0 ? nlohmann::json(s.interval_high) : nlohmann::json(nullptr)},
        {"inside_about_level",
         s.covered_about_level ? nlohmann::json(*s.covered_about_level) : nlohmann::json(nullptr)},
        {"expected", s.expected_coverage ? nlohmann::json{{"draws", s.expected_coverage->draws},
                                                          {"low", s.expected_coverage->low},
                                                          {"median", s.expected_coverage->median},
                                                          {"high", s.expected_coverage->high},
                                                          {"band", {kCoverageBand[0], kCoverageBand[1]}},
                                                          {"in_band", s.expected_coverage->in_band}}
                                         : nlohmann::json(nullptr)}}},
      {"speedup_coverage", ratio_coverage_json(s)},
      {"composition", s.composition},
      {"order",
       {{"pairs", s.order_pairs},
        {"required", job.validation.order},
        {"checked", s.orders.size()},
        {"as_predicted",
         std::count_if(s.orders.begin(), s.orders.end(), [](const OrderResult& o) { return o.ok; })},
        {"checks", orders}}},
      {"numerics",
       {{"checked", s.checked},
        {"max_loss_error", s.max_check_loss_error},
        {"max_grad_diff", s.max_check_grad_diff},
        {"max_weight_diff", s.max_check_weight_diff},
        {"tolerance", {{"loss", kCheckLoss}, {"grad", kCheckGrad}, {"weight", kCheckWeight}}}}},
      {"failures", s.failures},
      {"ok", s.ok()},
      {"spread", s.spread},
      {"verdict", s.verdict()},
      {"rows", rows_json}};
  costmodel::write_file_atomic(dir + "/summary.json", summary.dump(2) + "\n");

  // The plot: Python with matplotlib, when there is one.
  const char* env_script = std::getenv("OSDP_PLOT_SCRIPT");
  std::string script = env_script != nullptr ? env_script : OSDP_PLOT_SCRIPT;
  if (script.empty() || !std::filesystem::exists(script))
    return fmt::format("no plot: the script {} is not there (set OSDP_PLOT_SCRIPT)", script);
  const char* env_python = std::getenv("OSDP_PYTHON");
  const std::string python = env_python != nullptr                         ? env_python
                             : std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3"
                                                                           : "python3";
  const std::string cmd = fmt::format("'{}' '{}' '{}/summary.json' '{}/predicted_vs_measured.png' 2>&1",
                                      python, script, dir, dir);
  std::FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return "no plot: could not start " + python;
  std::string output;
  char buf[256];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) output += buf;
  const int rc = pclose(pipe);
  if (rc != 0) return fmt::format("no plot ({} exited with {}): {}", python, rc, output);
  return "";
}

}  // namespace osdp::experiments
