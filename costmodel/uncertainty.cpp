// Calibration uncertainty and intervals (uncertainty.hpp).
#include "costmodel/uncertainty.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <boost/math/distributions/students_t.hpp>

#include "costmodel/calibration.hpp"

namespace osdp::costmodel {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double residual_of(const nlohmann::json& fit, const char* key) {
  if (!fit.contains(key) || !fit[key].is_object()) return 0;
  const auto& r = fit[key].value("residual_rms", nlohmann::json(0.0));
  return r.is_number() && r.get<double>() > 0 ? r.get<double>() : 0.0;
}

bool any_segment_error(const std::vector<Segment>& segs) {
  return std::any_of(segs.begin(), segs.end(), [](const Segment& s) { return s.residual > 0; });
}

}  // namespace

FitErrors fit_errors(const Calibration& cal) {
  FitErrors e;
  if (!cal.provenance.is_object() || !cal.provenance.contains("fit") || !cal.provenance["fit"].is_object())
    return e;
  const nlohmann::json& fit = cal.provenance["fit"];
  e.gemm_formula = residual_of(fit, "gemm");
  e.elementwise = residual_of(fit, "elementwise");
  e.optimizer = residual_of(fit, "adam");
  e.accumulate = residual_of(fit, "accumulate");
  e.replicate = residual_of(fit, "replicate");
  if (fit.contains("repeat_spread") && fit["repeat_spread"].is_object()) {
    const auto& r = fit["repeat_spread"];
    const auto value = [&](const char* k) {
      return r.contains(k) && r[k].is_number() && r[k].get<double>() > 0 ? r[k].get<double>() : 0.0;
    };
    e.compute_drift = value("compute");
    e.communication_drift = value("communication");
  }
  if (fit.contains("composition") && fit["composition"].is_object()) {
    const auto& c = fit["composition"];
    if (c.contains("sigma") && c["sigma"].is_number() && c["sigma"].get<double>() > 0)
      e.composition = c["sigma"].get<double>();
    e.level = fitted_level(cal);
    if (e.level) {
      const auto& s = c.value("level_sigma", nlohmann::json(0.0));
      e.level_sigma = s.is_number() && s.get<double>() > 0 ? s.get<double>() : 0.0;
      const auto& dof = c.value("level_dof", nlohmann::json(0));
      e.level_dof = dof.is_number_integer() && dof.get<int>() > 0 ? dof.get<int>() : 0;
      e.compute_drift = e.communication_drift = 0;
    }
  }
  if (fit.contains("interference_samples") && fit["interference_samples"].is_array()) {
    std::vector<double> logs;
    for (const auto& v : fit["interference_samples"])
      if (v.is_number() && v.get<double>() > 0) logs.push_back(std::log(v.get<double>()));
    if (logs.size() >= 2) {
      double mean = 0, var = 0;
      for (double x : logs) mean += x / static_cast<double>(logs.size());
      for (double x : logs) var += (x - mean) * (x - mean) / static_cast<double>(logs.size() - 1);
      e.interference = std::sqrt(var);
    }
  }
  return e;
}

std::optional<double> fitted_level(const Calibration& cal) {
  if (!cal.provenance.is_object()) return std::nullopt;
  const auto fit = cal.provenance.find("fit");
  if (fit == cal.provenance.end() || !fit->is_object()) return std::nullopt;
  const auto c = fit->find("composition");
  if (c == fit->end() || !c->is_object()) return std::nullopt;
  const auto level = c->find("level");
  if (level == c->end() || !level->is_number() || !(level->get<double>() > 0)) return std::nullopt;
  return level->get<double>();
}

bool has_uncertainty(const Calibration& cal) {
  const FitErrors e = fit_errors(cal);
  if (e.gemm_formula > 0 || e.elementwise > 0 || e.optimizer > 0 || e.interference > 0 || e.accumulate > 0 ||
      e.replicate > 0 || e.compute_drift > 0 || e.communication_drift > 0 || e.composition > 0 ||
      e.level_sigma > 0)
    return true;
  if (cal.gemm_times.size() >= 2) return true;
  for (const CollectiveKind& k : kCollectives)
    for (const auto* level : {&cal.intra, &cal.inter})
      if (any_segment_error(level->segments(k.kind))) return true;
  return std::any_of(kCollectives.begin(), kCollectives.end(),
                     [&](const CollectiveKind& k) { return any_segment_error(cal.segments(k.kind)); });
}

double standard_normal(std::uint64_t draw, std::initializer_list<std::int64_t> key) {
  std::uint64_t h = splitmix64(draw);
  for (const std::int64_t k : key) h = splitmix64(h ^ static_cast<std::uint64_t>(k));
  const std::uint64_t a = splitmix64(h), b = splitmix64(h ^ 0x5851f42d4c957f2dull);
  // Box-Muller on two uniforms in (0, 1].
  const double u1 = (static_cast<double>(a >> 11) + 1.0) / 9007199254740992.0;
  const double u2 = static_cast<double>(b >> 11) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

double student_t(std::uint64_t draw, int dof, std::int64_t key) {
  const double z = standard_normal(draw, {key});
  if (dof <= 0) return z;
  double chi2 = 0;
  for (int i = 1; i <= dof; ++i) {
    const double x = standard_normal(draw, {key, i});
    chi2 += x * x;
  }
  return z / std::sqrt(chi2 / dof);
}

double student_t_at(int dof, double z) {
  if (dof <= 0) return z;
  const double p = 0.5 * std::erfc(-z / std::numbers::sqrt2);
  return boost::math::quantile(boost::math::students_t_distribution<double>(dof), p);
}

double quantile_factor(double sigma, double z) {
  return sigma > 0 ? std::exp(sigma * z - sigma * sigma / 2) : 1.0;
}

double draw_factor(std::uint64_t draw, double sigma, std::initializer_list<std::int64_t> key) {
  if (!(sigma > 0)) return 1.0;
  return quantile_factor(sigma, standard_normal(draw, key));
}

Interval central_interval(std::vector<double> samples, double level) {
  if (samples.size() < 2) return {};
  std::sort(samples.begin(), samples.end());
  const auto quantile = [&](double q) {
    const double pos = q * static_cast<double>(samples.size() - 1);
    const auto i = static_cast<std::size_t>(std::floor(pos));
    const double f = pos - static_cast<double>(i);
    return i + 1 < samples.size() ? samples[i] * (1 - f) + samples[i + 1] * f : samples[i];
  };
  const double tail = (1.0 - level) / 2.0;
  return {quantile(tail), quantile(1.0 - tail)};
}

Interval ratio_interval(const std::vector<double>& numerator, const std::vector<double>& denominator,
                        double scale, double level) {
  if (numerator.size() != denominator.size()) return {};
  std::vector<double> ratio;
  for (std::size_t d = 0; d < numerator.size(); ++d) ratio.push_back(scale * numerator[d] / denominator[d]);
  return central_interval(std::move(ratio), level);
}

nlohmann::json to_json(const Interval& i) {
  if (!i.known()) return nullptr;
  return nlohmann::json::array({i.low, i.high});
}

Calibration drawn(const Calibration& cal, std::uint64_t d) {
  Calibration c = cal;
  c.draw = d;
  c.quantile_z.reset();
  return c;
}

Calibration for_model(const Calibration& cal, const std::string& model) {
  if (!fitted_level(cal)) return cal;
  const nlohmann::json& c = cal.provenance["fit"]["composition"];
  const auto models = c.find("level_models");
  if (models == c.end() || !models->is_object()) return cal;
  const auto own = models->find(model);
  if (own == models->end() || !own->is_object() || !own->value("level", nlohmann::json()).is_number())
    return cal;
  Calibration out = cal;
  nlohmann::json& oc = out.provenance["fit"]["composition"];
  for (const char* k : {"level", "level_sigma", "level_dof"}) oc[k] = own->value(k, nlohmann::json());
  oc["level_of"] = model;
  return out;
}

std::string level_of(const Calibration& cal) {
  if (!fitted_level(cal)) return "";
  const auto& of = cal.provenance["fit"]["composition"].value("level_of", nlohmann::json());
  return of.is_string() ? of.get<std::string>() : "";
}

Calibration at_quantile(const Calibration& cal, double z) {
  Calibration c = cal;
  c.draw.reset();
  c.quantile_z = z;
  return c;
}

}  // namespace osdp::costmodel
