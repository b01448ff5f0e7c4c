// Dynamic loss scaling: the update rule and checkpoint state (see loss_scaler.hpp).
#include "optim/loss_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"

namespace shardtrain {

namespace {

// The loss is scaled in fp32, so the scale must stay a finite float.
constexpr double k_max_scale = std::numeric_limits<float>::max();

}  // namespace

LossScaler::LossScaler(const LossScalerConfig& config)
    : m_config(config),
      m_scale(config.enabled ? config.init_scale : 1.0),
      m_hysteresis_left(config.hysteresis) {
  const LossScalerConfig& c = m_config;
  SHARDTRAIN_CHECK(c.init_scale > 0 && c.init_scale <= k_max_scale,
                   fmt::format("loss scaler init_scale = {} must be in (0, {}]", c.init_scale, k_max_scale));
  SHARDTRAIN_CHECK(c.min_scale > 0, fmt::format("loss scaler min_scale = {} must be > 0", c.min_scale));
  SHARDTRAIN_CHECK(c.min_scale <= c.init_scale,
                   fmt::format("loss scaler min_scale = {} exceeds init_scale = {}", c.min_scale, c.init_scale));
  SHARDTRAIN_CHECK(c.growth_factor > 1 && std::isfinite(c.growth_factor),
                   fmt::format("loss scaler growth_factor = {} must be > 1", c.growth_factor));
  SHARDTRAIN_CHECK(c.backoff_factor > 0 && c.backoff_factor < 1,
                   fmt::format("loss scaler backoff_factor = {} must be in (0, 1)", c.backoff_factor));
  SHARDTRAIN_CHECK(c.growth_interval >= 1,
                   fmt::format("loss scaler growth_interval = {} must be >= 1", c.growth_interval));
  SHARDTRAIN_CHECK(c.hysteresis >= 1, fmt::format("loss scaler hysteresis = {} must be >= 1", c.hysteresis));
  SHARDTRAIN_CHECK(c.max_consecutive_skips >= 1,
                   fmt::format("loss scaler max_consecutive_skips = {} must be >= 1", c.max_consecutive_skips));
}

LossScaler::Decision LossScaler::update(bool found_inf) {
  Decision d{false, false, m_scale, m_scale, false, false, 0};
  if (!m_config.enabled) return d;

  if (!found_inf) {
    m_consecutive_skips = 0;
    if (++m_good_steps >= m_config.growth_interval) {
      m_good_steps = 0;
      m_hysteresis_left = m_config.hysteresis;
      const double grown = m_scale * m_config.growth_factor;
      if (grown <= k_max_scale) m_scale = grown;
    }
  } else {
    d.skip = true;
    d.at_min_scale = m_scale <= m_config.min_scale;
    m_good_steps = 0;
    ++m_consecutive_skips;
    m_hysteresis_left = std::max(m_hysteresis_left - 1, 0);
    if (m_hysteresis_left == 0) m_scale = std::max(m_scale * m_config.backoff_factor, m_config.min_scale);
  }
  d.new_scale = m_scale;
  d.scale_changed = d.new_scale != d.old_scale;
  d.consecutive_skips = m_consecutive_skips;
  d.abort = m_consecutive_skips >= m_config.max_consecutive_skips;
  return d;
}

LossScalerState LossScaler::state() const {
  return {m_scale, m_good_steps, m_hysteresis_left, m_consecutive_skips};
}

void LossScaler::load_state(const LossScalerState& s) {
  const LossScalerConfig& c = m_config;
  if (!c.enabled) {
    // A disabled scaler has one state; anything else is an fp16 run's scaler.
    SHARDTRAIN_CHECK(s.scale == 1.0 && s.good_steps == 0 && s.consecutive_skips == 0,
                     fmt::format("loss scaler is disabled (fp32/bf16) but the state has loss scale {}, "
                                 "{} good steps, {} consecutive skips", s.scale, s.good_steps, s.consecutive_skips));
    return;
  }
  SHARDTRAIN_CHECK(s.scale >= c.min_scale && s.scale <= k_max_scale,
                   fmt::format("loss scale {} outside [min_scale = {}, {}]", s.scale, c.min_scale, k_max_scale));
  SHARDTRAIN_CHECK(s.good_steps >= 0 && s.good_steps < c.growth_interval,
                   fmt::format("loss scaler good_steps = {} outside [0, growth_interval = {})", s.good_steps,
                               c.growth_interval));
  SHARDTRAIN_CHECK(s.hysteresis_left >= 0 && s.hysteresis_left <= c.hysteresis,
                   fmt::format("loss scaler hysteresis_left = {} outside [0, hysteresis = {}]", s.hysteresis_left,
                               c.hysteresis));
  SHARDTRAIN_CHECK(s.consecutive_skips >= 0,
                   fmt::format("loss scaler consecutive_skips = {} is negative", s.consecutive_skips));
  m_scale = s.scale;
  m_good_steps = s.good_steps;
  m_hysteresis_left = s.hysteresis_left;
  m_consecutive_skips = s.consecutive_skips;
}

std::string LossScaler::describe(const Decision& d, std::int64_t step) const {
  if (!d.skip) {
    if (d.scale_changed)
      return fmt::format("step {}: loss scale {} -> {} after {} clean steps", step, d.old_scale, d.new_scale,
                         m_config.growth_interval);
    return fmt::format("step {}: loss scale stays {}", step, d.new_scale);
  }
  std::string line = fmt::format("step {}: gradient overflow (inf/NaN), step skipped; ", step);
  // Notes in parentheses: why the scale did not move, and how close the run is to aborting.
  std::string notes;
  if (d.scale_changed) {
    line += fmt::format("loss scale {} -> {}", d.old_scale, d.new_scale);
  } else {
    line += fmt::format("loss scale stays {}", d.new_scale);
    notes = d.at_min_scale ? "the minimum" : "hysteresis";
  }
  const std::int64_t limit = m_config.max_consecutive_skips;
  if (d.abort || d.at_min_scale || d.consecutive_skips > 1) {
    if (!notes.empty()) notes += "; ";
    notes += fmt::format("{} consecutive skipped step{}, ", d.consecutive_skips, d.consecutive_skips == 1 ? "" : "s");
    notes += d.abort ? fmt::format("the limit is {}: aborting", limit) : fmt::format("abort after {}", limit);
  }
  if (!notes.empty()) line += " (" + notes + ")";
  return line;
}

}  // namespace shardtrain
