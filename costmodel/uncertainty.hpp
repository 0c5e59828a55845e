// How sure a calibration is of what it prices, and intervals on predictions drawn from it.
//
// Every price a calibration fits carries a relative error, read from the calibration itself:
//   a collective on segment j of a level:  its fit's relative RMS residual (the segment's "residual_rms")
//   a GEMM:                                 with measured shapes, the leave-one-out error of GemmPrice's
//                                           correction (each measured shape priced from the others:
//                                           how far a shape's time is from what its neighbours say);
//                                           without, the GEMM formula fit's residual
//   an elementwise kernel, the optimizer,
//   a partial sum's accumulation,
//   a REPLICATE operator's runtime copies:  their fits' residuals (provenance "fit"); an extra launch of
//                                           a sliced elementwise kernel shares the elementwise error
//   the overlap interference i:             the spread of ln of its samples
//   the machine's drift:                    the spread of the repeats of each point (the calibration
//                                           times every point in passes over all of them), one factor
//                                           for all compute, one for all calibrated collectives; where
//                                           the calibration's probes ran, their step level's spread
//                                           instead (composition.hpp), one factor for both
// A draw d scales each price by exp(sigma z - sigma^2 / 2), z standard normal (a factor of mean 1:
// the fits minimize squared relative errors, so a fitted price is the mean of what it prices, and a
// step's sum of many prices stays centred on the prediction), drawn independently per fitted
// point: per GEMM shape, per collective segment and octave of buffer size, per octave of elementwise
// bytes and of a REPLICATE operator's weights (a fit's residuals are errors of single points, so the same
// point, wherever a plan prices it, has the same error in a draw; the optimizer and the interference are one
// point each); the drifts are one factor each, common to the whole step and to every plan in a draw (a slower
// machine slows every plan: step intervals widen, speedups hardly move). Prices the calibration does not give
// (the cluster's links, a datasheet's compute) have no error here. Beside the prices, a whole step
// takes the model's composition error (composition.hpp), drawn per strategy. A plan's interval is the central
// 90% of its predictions over draws 1..D, every draw pricing the whole step (the analytic model, or the
// simulator) as it prices the nominal one; a speedup's interval is the same quantiles of the ratio in each
// draw (both plans priced on the same draw).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace osdp::costmodel {

struct Calibration;

inline constexpr double kIntervalLevel = 0.90;
inline constexpr int kDefaultDraws = 100;

// The relative errors of a calibration's single-point fits (0 where not recorded).
struct FitErrors {
  double gemm_formula = 0, elementwise = 0, optimizer = 0, interference = 0, accumulate = 0;
  double replicate = 0;  // a REPLICATE operator's runtime copies (ComputeSpec::replicate_overhead_s)
  // The machine's drift between the repeats of a point (provenance "fit"/"repeat_spread"): one factor
  // per draw shared by every compute price, one by every calibrated collective.
  double compute_drift = 0, communication_drift = 0;
  // The model's composition error between strategies (composition.hpp; provenance "fit"/"composition"/
  // "sigma", from the calibration's probes): a plan's step scaled per draw by its operators' factors.
  double composition = 0;
  // The step's level (composition.hpp; "fit"/"composition"/"level" and "level_sigma", from the probes):
  // every calibrated price scaled by `level`, and one factor per draw of spread `level_sigma` for the
  // whole step. Where the probes fitted it, it replaces both drifts (set to 0 here).
  std::optional<double> level;
  double level_sigma = 0;
  int level_dof = 0;  // "level_dof": its factor is a Student t of these degrees of freedom (0: normal)
};
// Read from the calibration's provenance ("fit": gemm, elementwise, adam, accumulate, replicate,
// interference_samples).
FitErrors fit_errors(const Calibration& cal);
// The step's level the calibration's probes fitted ("fit"/"composition"/"level"), if they did.
std::optional<double> fitted_level(const Calibration& cal);
// That level, 1 without one: what the nominal prices are scaled by.
inline double step_level(const Calibration& cal) {
  return fitted_level(cal).value_or(1.0);
}
// Whether the calibration records any error an interval could be drawn from.
bool has_uncertainty(const Calibration& cal);
// The calibration as it prices plans of `model`: where its probes ran that model (osdp calibrate
// --probe-batch; "fit"/"composition"/"level_models"), its own level, spread and degrees of freedom
// replace the probes' level across models, and "level_of" names it; otherwise `cal` unchanged.
Calibration for_model(const Calibration& cal, const std::string& model);
// The model whose own level `cal` prices with (for_model), "" for the level across models.
std::string level_of(const Calibration& cal);

// A standard normal variate for draw `draw` of the point named by `key` (deterministic).
double standard_normal(std::uint64_t draw, std::initializer_list<std::int64_t> key);
// exp(sigma z - sigma^2 / 2) for that variate; 1 when sigma is 0.
double draw_factor(std::uint64_t draw, double sigma, std::initializer_list<std::int64_t> key);
// A Student t variate of `dof` degrees of freedom for draw `draw` of the point `key` (deterministic):
// the normal of {key} over the root of the mean square of the normals of {key, 1..dof}; the normal
// itself for dof 0.
double student_t(std::uint64_t draw, int dof, std::int64_t key);
// Student's t quantile of `dof` degrees of freedom at the normal's probability of z; z for dof 0.
double student_t_at(int dof, double z);
// exp(sigma z - sigma^2 / 2) at a given z (a price at that quantile of its error); 1 when sigma is 0.
double quantile_factor(double sigma, double z);

struct Interval {
  double low = 0, high = 0;
  bool known() const { return high > 0; }
  bool contains(double x) const { return known() && x >= low && x <= high; }
};
// The central `level` interval of the samples (linear interpolation between order statistics);
// unknown for fewer than two samples.
Interval central_interval(std::vector<double> samples, double level = kIntervalLevel);
nlohmann::json to_json(const Interval& i);
// The central interval of numerator[d] / denominator[d] over the draws d, times `scale` (two
// predictions priced on the same draws, compared draw by draw); unknown unless both have the same
// number of draws, at least two.
Interval ratio_interval(const std::vector<double>& numerator, const std::vector<double>& denominator,
                        double scale = 1.0, double level = kIntervalLevel);

// The calibration with draw `d` set (d >= 1): priced, every fitted price scaled by its error.
Calibration drawn(const Calibration& cal, std::uint64_t d);
// The calibration with every fitted price at the same quantile of its error: scaled by
// exp(sigma z - sigma^2 / 2) for every error at once (every point, every drift). At z = kRobustZ
// each price is at its 95th percentile: the step so priced is at least its 95th percentile when the
// errors move together, beyond it when they do not (a comonotone bound). `osdp plan --objective
// robust` searches under it.
Calibration at_quantile(const Calibration& cal, double z);
inline constexpr double kRobustZ = 1.6448536269514722;  // the standard normal's 95th percentile

}  // namespace osdp::costmodel
