// The model's composition error: how far a whole step's time is from the sum the model composes of
// its calibrated prices, beyond those prices' own errors (uncertainty.hpp), and differently for
// different strategies. The microbenchmarks cannot see it (the waits a collective absorbs when the
// ranks arrive apart, the kernels of a step running beside each other's traffic, a runtime's own work
// around a strategy's collectives), and it does not cancel between two plans, so without it a
// speedup's interval is too narrow.
//
// Measured by the calibration (osdp calibrate's probes): a few plans of a model no validation set
// holds (uniform strategies and searched ones, with and without slices), timed side by side (their
// steps interleaved, so that the machine's pace cancels between them) and predicted from the
// calibration just fitted. Step j of a group's plans ran at the pace P_j, the geometric mean of their
// times at j; plan i's residual is r_i = ln(median_j (t_ij / P_j) / prediction_i). Their variance
// about each group's mean over the groups' degrees of freedom, less what the run's own noise and the
// calibration's drawn errors already put there, is sigma^2:
//   V      = sum_g sum_i (r_i - mean_g r)^2 / sum_g (n_g - 1)
//   noise  = mean_i (pi / 2) s_i^2 / m_i   the variance of a median of m_i steps whose ln(t_ij / P_j)
//                                          have the standard deviation s_i
//   drawn  = the same V over the plans' drawn predictions, ln(drawn_d / nominal), averaged over draws
//   sigma^2 = max(0, V - noise - drawn)
//
// The step's level: how far whole steps land from the sum of the calibrated prices, all strategies
// alike (the runtime's work around a step that no microbenchmark times, the machine's pace in the
// minutes after the calibration's). Each group's mean of e_i = ln(median_j t_ij / prediction_i) is
// one workload's level at one micro-batch; the groups of a workload (its model) are averaged to M_w,
// and the level L is the mean of the K workloads' M_w, the predictions' correction (every calibrated
// price is scaled by e^L). A further model's level is what it is uncertain about: a random effect per
// workload and one per group within it, so the predictive spread of a further workload's group is
//   s_L^2 = var(M_w) (1 + 1 / K) + s_within^2 (1 - 1 / n)
// (var(M_w) estimates the workloads' spread plus s_within^2 / n, n the groups per workload, s_within^2
// the groups' pooled variance about their workload's mean), and with K workloads it is known to K - 1
// degrees of freedom: it is drawn as a Student t factor of K - 1 degrees of freedom, one per draw for
// every plan (a common factor: it widens step intervals and leaves speedups alone). Groups without a
// workload, or all of one, stand each for a workload (K = G, n = 1). It replaces the drift of the
// calibration's repeats (uncertainty.hpp), which it measures on whole steps. Fitted from two groups
// on; with fewer, none.
//
// A model the probes ran (osdp calibrate --model M --probe-batch B: the model to be planned, at
// micro-batches its plans will not use) has its own level, M_w, for its plans (for_model,
// uncertainty.hpp): what a further micro-batch of it may take is s_within^2 (1 + 1 / n_w), known to
// the pooled within-workload degrees of freedom sum_w (n_w - 1). Within a calibration a model's other
// micro-batches predicted its group about twice as closely as the other models did; in the
// validations that followed, one micro-batch of it predicted them worse than the level across models
// (docs/intervals.md), so it is asked for, not the default.
//
// Drawn per strategy: in draw d an operator whose choice has key k (the choice and the plan's layout)
// runs at exp(sigma z_{d,k} - sigma^2 / 2); a plan's step is scaled by the mean of its operators'
// factors (mean 1). Two plans that choose alike for every operator share their factor; a uniform plan
// moves by sigma; two uniform plans of different strategies move apart by sqrt(2) sigma.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace osdp::costmodel {

struct Plan;

// One probe plan of the calibration: its group (the plans timed side by side), the nominal prediction,
// the prediction under each draw of the calibration's errors (may be empty), each timed step (step j
// of every plan of a group ran side by side), and the workload (the model) the group ran: groups of
// one workload share its part of the level ("": the group is a workload of its own).
struct ProbeStep {
  std::string group;
  double predicted_s = 0;
  std::vector<double> drawn_s;
  std::vector<double> steps_s;
  std::string workload;
};

// The fit above: {"sigma", "variance", "noise", "drawn", "plans", "groups", "dof", "residuals": [per
// probe, r_i - mean_g r], "level": e^L, "level_sigma": s_L, "level_dof": K - 1, "level_workloads": K,
// "level_groups": {group: e^mean}, "level_models": {workload: {"level": e^M_w, "level_sigma",
// "level_dof", "groups": n_w}}}; "level_models" with two workloads or more and a degree of freedom
// within one. Probes without steps or a prediction are left out, groups of one plan give no degree of
// freedom; with no degree of freedom sigma is 0 and "dof" says 0; with fewer than two groups "level",
// "level_sigma" and "level_dof" are null.
nlohmann::json composition_fit(const std::vector<ProbeStep>& probes);

// The key of each operator's strategy in `plan` (its choice and the plan's layout).
std::vector<std::int64_t> composition_keys(const Plan& plan);
// The factor a plan's step takes in draw `d` for a composition error `sigma`: the mean over its
// operators of exp(sigma z_{d,key} - sigma^2 / 2). 1 when sigma is 0 or the plan has no operator.
double composition_factor(const std::vector<std::int64_t>& keys, std::uint64_t d, double sigma);

}  // namespace osdp::costmodel
