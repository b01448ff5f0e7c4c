// shardtrain/optim/loss_scaler.hpp
// Owns the fp16 dynamic loss scale and its counters. It decides, once per
// optimizer step, whether the step is skipped and how the scale moves. That
// follows PyTorch's GradScaler, with Megatron-LM's hysteresis (DynamicGradScaler).
// No MPI and no I/O here. The caller passes the found-inf flag already reduced
// across all ranks (each rank sees only its shard), and it prints describe().
//
// Rules, applied by update(found_inf):
//  - Clean step: good_steps += 1 and consecutive_skips = 0. When good_steps
//    reaches growth_interval: scale *= growth_factor, good_steps = 0 and
//    hysteresis_left = hysteresis. The scale does not grow if the result would
//    not fit in a float.
//  - Overflow: the step is always skipped. good_steps = 0,
//    consecutive_skips += 1, and hysteresis_left -= 1 (it stops at 0). Once
//    hysteresis_left is 0, the scale backs off to
//    max(scale * backoff_factor, min_scale). hysteresis_left is reset only by a
//    growth, not by a back-off. So with hysteresis 2, the first overflow keeps
//    the scale, and the second and every later one (until the next growth)
//    back it off. This is Megatron's rule; DeepSpeed's `delayed_shift` has the
//    same effect.
//  - An overflow while the scale is already min_scale sets at_min_scale (the
//    caller warns). When consecutive_skips reaches max_consecutive_skips, abort
//    is set (the caller stops the run with a message).
//  - Disabled (fp32/bf16): the scale is 1, nothing is skipped and no state ever
//    changes. What to do with non-finite gradients is then the caller's call.
// Invariants: min_scale <= scale <= FLT_MAX; 0 <= good_steps < growth_interval;
// 0 <= hysteresis_left <= hysteresis; 0 <= consecutive_skips.
#pragma once

#include <cstdint>
#include <string>

namespace shardtrain {

struct LossScalerConfig {
  double init_scale = 65536.0;               // 2^16, at most FLT_MAX
  double growth_factor = 2.0;                // > 1
  double backoff_factor = 0.5;               // in (0, 1)
  std::int64_t growth_interval = 2000;       // clean steps between growths
  int hysteresis = 2;                        // overflows before the first back-off
  double min_scale = 1.0;                    // in (0, init_scale]
  std::int64_t max_consecutive_skips = 100;  // abort when this many steps in a row overflow
  bool enabled = true;                       // false: fp32/bf16, scale fixed at 1
};

// Everything a checkpoint needs to continue the scaler exactly.
struct LossScalerState {
  double scale;
  std::int64_t good_steps;
  int hysteresis_left;
  std::int64_t consecutive_skips;
};

class LossScaler {
 public:
  // The outcome of one update().
  struct Decision {
    bool skip;                       // do not apply this step's update
    bool scale_changed;              // new_scale != old_scale
    double old_scale;                // the scale this step's loss was multiplied by
    double new_scale;                // the scale for the next step
    bool at_min_scale;               // overflow while the scale was already min_scale
    bool abort;                      // consecutive_skips reached max_consecutive_skips
    std::int64_t consecutive_skips;  // skipped steps in a row, this one included
  };

  // Checks the config (SHARDTRAIN_CHECK; RunConfig validation reports user errors first).
  explicit LossScaler(const LossScalerConfig& config);

  double scale() const { return m_scale; }
  // 1/scale as a float, the factor that unscales the gradients.
  float inv_scale() const { return static_cast<float>(1.0 / m_scale); }
  bool enabled() const { return m_config.enabled; }
  const LossScalerConfig& config() const { return m_config; }

  // Call exactly once per optimizer step, with the found-inf flag reduced across ranks.
  [[nodiscard]] Decision update(bool found_inf);

  LossScalerState state() const;
  // Restores a state(). Checks it against this scaler's config.
  void load_state(const LossScalerState& s);

  // One line for the log, for example:
  //   "step 120: gradient overflow (inf/NaN), step skipped; loss scale 65536 -> 32768"
  // The caller usually prints it only when d.skip or d.scale_changed is set.
  std::string describe(const Decision& d, std::int64_t step) const;

 private:
  LossScalerConfig m_config;
  double m_scale;
  std::int64_t m_good_steps = 0;
  int m_hysteresis_left;
  std::int64_t m_consecutive_skips = 0;
};

}  // namespace shardtrain
