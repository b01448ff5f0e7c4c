// The recompute scheduler: fixed policies, the budget DP, and the op-list
// simulator every schedule is checked (and sized) with.
#include "plan/recompute.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"

namespace shardtrain {

namespace {

using Op = RecomputeOp;
using Kind = RecomputeOp::Kind;

Op fwd(int i, bool keep) { return Op{Kind::Forward, i, keep}; }
Op bwd(int i) { return Op{Kind::Backward, i, true}; }
Op free_input(int j) { return Op{Kind::FreeInput, j, true}; }

std::vector<Op> none_ops(int n) {
  std::vector<Op> ops;
  for (int i = 0; i < n; ++i) ops.push_back(fwd(i, true));
  for (int i = n - 1; i >= 0; --i) ops.push_back(bwd(i));
  return ops;
}

// Checkpoints at x_0, x_k, x_2k, ...; the last segment keeps its internals in the
// forward pass, every other segment is recomputed once, just before its backward.
// k = 1 is "full" (every input kept, every layer but the last recomputed).
std::vector<Op> segment_ops(int n, int k) {
  std::vector<Op> ops;
  const int last = k * ((n - 1) / k);  // first layer of the last segment
  for (int i = 0; i < n; ++i) {
    if (i >= last) {
      ops.push_back(fwd(i, true));
    } else {
      ops.push_back(fwd(i, false));                       // x_{i+1} to a checkpoint slot
      if (i > 0 && i % k != 0) ops.push_back(free_input(i));  // an intermediate input: done
    }
  }
  for (int i = n - 1; i >= last; --i) ops.push_back(bwd(i));
  if (last > 0) ops.push_back(free_input(last));
  for (int s = last - k; s >= 0; s -= k) {
    for (int i = s; i < s + k; ++i) ops.push_back(fwd(i, true));
    for (int i = s + k - 1; i >= s; --i) ops.push_back(bwd(i));
    if (s > 0) ops.push_back(free_input(s));
  }
  return ops;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// Rotor-style DP over (s, t, m): the fewest forward FLOPs to run the backward of
// layers s..t, given x_s stored elsewhere, the gradient of x_{t+1} at hand and m
// memory units free (a unit = one checkpoint slot; an internals slot = `a` units).
class BudgetSolver {
 public:
  BudgetSolver(const ChainCosts& c, std::int64_t units)
      : m_c(c), m_n(c.size()), m_units(units) {
    const std::int64_t in = *std::max_element(c.output_bytes.begin(), c.output_bytes.end());
    const std::int64_t slot = *std::max_element(c.saved_bytes.begin(), c.saved_bytes.end());
    m_a = (slot + in - 1) / in;
    m_cost.assign(static_cast<std::size_t>(m_n) * m_n * (m_units + 1), -1.0);
    m_choice.assign(m_cost.size(), 0);
    m_prefix.assign(m_n + 1, 0.0);
    for (int i = 0; i < m_n; ++i) m_prefix[i + 1] = m_prefix[i] + c.forward_flops[i];
  }
  double cost(int s, int t, std::int64_t m) {
    if (m < 0) return kInf;
    const std::size_t k = index(s, t, m);
    if (m_cost[k] >= 0) return m_cost[k];
    double best = kInf;
    int choice = 0;  // 0: keep s (leaf when s == t), s' > s: checkpoint x_{s'}
    if (m >= m_a) best = m_c.forward_flops[s] + (s == t ? 0.0 : cost(s + 1, t, m - m_a));
    for (int sp = s + 1; sp <= t; ++sp) {
      if (m < (sp - s >= 2 ? 2 : 1)) break;
      const double right = cost(sp, t, m - 1);
      if (right == kInf) continue;
      const double total = m_prefix[sp] - m_prefix[s] + right + cost(s, sp - 1, m);
      if (total < best) { best = total; choice = sp; }
    }
    m_cost[k] = best;
    m_choice[k] = choice;
    return best;
  }
  void emit(int s, int t, std::int64_t m, std::vector<Op>& ops) {
    cost(s, t, m);
    const int sp = m_choice[index(s, t, m)];
    if (sp == 0) {
      ops.push_back(fwd(s, true));
      if (s < t) emit(s + 1, t, m - m_a, ops);
      ops.push_back(bwd(s));
      return;
    }
    ops.push_back(fwd(s, false));
    for (int j = s + 1; j < sp; ++j) {
      ops.push_back(fwd(j, false));
      ops.push_back(free_input(j));
    }
    emit(sp, t, m - 1, ops);
    ops.push_back(free_input(sp));
    emit(s, sp - 1, m, ops);
  }

 private:
  std::size_t index(int s, int t, std::int64_t m) const {
    return (static_cast<std::size_t>(s) * m_n + t) * (m_units + 1) + static_cast<std::size_t>(m);
  }
  const ChainCosts& m_c;
  int m_n;
  std::int64_t m_units, m_a = 1;
  std::vector<double> m_cost, m_prefix;
  std::vector<int> m_choice;
};

constexpr int kMaxBudgetLayers = 64;

void check_costs(const ChainCosts& c) {
  SHARDTRAIN_CHECK(c.size() > 0, "recompute: empty chain");
  SHARDTRAIN_CHECK(c.output_bytes.size() == c.saved_bytes.size() &&
                       c.forward_flops.size() == c.saved_bytes.size(),
                   "recompute: cost vectors of different lengths");
  for (int i = 0; i < c.size(); ++i)
    SHARDTRAIN_CHECK(c.output_bytes[i] > 0 && c.saved_bytes[i] >= c.output_bytes[i],
                     "recompute: a layer must save at least its output");
}

RecomputeSchedule finish(const ChainCosts& c, std::string policy, std::vector<Op> ops) {
  RecomputeSchedule s;
  s.policy = std::move(policy);
  s.ops = std::move(ops);
  simulate(c, s);
  return s;
}

// The budget schedule for `units` free units, or nullopt when none fits.
std::optional<RecomputeSchedule> solve_units(const ChainCosts& c, std::int64_t units) {
  if (units < 1) return std::nullopt;
  BudgetSolver solver(c, units);
  if (solver.cost(0, c.size() - 1, units) == kInf) return std::nullopt;
  std::vector<Op> ops;
  solver.emit(0, c.size() - 1, units, ops);
  return finish(c, "budget", std::move(ops));
}

}  // namespace

void simulate(const ChainCosts& c, RecomputeSchedule& s) {
  check_costs(c);
  const int n = c.size();
  std::vector<char> ck(n + 1, 0), internals(n, 0);
  s.kept_inputs.assign(n, false);
  s.kept_internals.assign(n, false);
  s.slot_bytes = *std::max_element(c.saved_bytes.begin(), c.saved_bytes.end());
  s.input_bytes = *std::max_element(c.output_bytes.begin(), c.output_bytes.end());
  int live_int = 0, live_ck = 0, next_backward = n - 1;
  s.internal_slots = s.input_slots = 0;
  s.uses_scratch = false;
  s.forward_ops_in_pass = -1;
  s.forwards = 0;
  auto has_input = [&](int i) { return i == 0 || ck[i] || internals[i - 1]; };
  auto where = [&](std::size_t k) { return fmt::format("recompute schedule op {}", k); };
  for (std::size_t k = 0; k < s.ops.size(); ++k) {
    const Op& op = s.ops[k];
    SHARDTRAIN_CHECK(op.layer >= 0 && op.layer <= n, where(k) + ": layer out of range");
    switch (op.kind) {
      case Kind::Forward: {
        const int i = op.layer;
        SHARDTRAIN_CHECK(i < n && has_input(i), where(k) + fmt::format(": forward of layer {} without its input", i));
        if (op.keep) {
          SHARDTRAIN_CHECK(!internals[i], where(k) + ": internals computed twice");
          internals[i] = 1;
          s.internal_slots = std::max(s.internal_slots, ++live_int);
        } else {
          SHARDTRAIN_CHECK(!ck[i + 1], where(k) + ": checkpoint computed twice");
          s.uses_scratch = true;
          ck[i + 1] = 1;
          s.input_slots = std::max(s.input_slots, ++live_ck);
        }
        if (s.forward_ops_in_pass < 0) {  // still in the forward pass
          if (op.keep) s.kept_internals[i] = true;
          if (i == n - 1) {
            s.forward_ops_in_pass = static_cast<int>(k) + 1;
            for (int j = 1; j < n; ++j) s.kept_inputs[j] = ck[j] != 0;
          }
        }
        s.forwards += c.forward_flops[i];
        break;
      }
      case Kind::Backward: {
        const int i = op.layer;
        SHARDTRAIN_CHECK(s.forward_ops_in_pass >= 0, where(k) + ": backward before the forward pass ended");
        SHARDTRAIN_CHECK(i == next_backward, where(k) + fmt::format(": backward of layer {} out of order", i));
        SHARDTRAIN_CHECK(internals[i] && has_input(i), where(k) + fmt::format(": backward of layer {} without its internals or input", i));
        internals[i] = 0;
        --live_int;
        --next_backward;
        break;
      }
      case Kind::FreeInput: {
        SHARDTRAIN_CHECK(op.layer >= 1 && ck[op.layer], where(k) + ": freeing an input that is not held");
        ck[op.layer] = 0;
        --live_ck;
        break;
      }
    }
  }
  SHARDTRAIN_CHECK(next_backward == -1, "recompute schedule: not every layer has a backward");
  SHARDTRAIN_CHECK(live_int == 0 && live_ck == 0, "recompute schedule: slots left held at the end");
  s.peak_bytes = s.internal_slots * s.slot_bytes + s.input_slots * s.input_bytes +
                 (s.uses_scratch ? c.scratch_bytes : 0);
  double one_pass = c.other_forward_flops;
  for (double f : c.forward_flops) one_pass += f;
  double chain = 0;
  for (double f : c.forward_flops) chain += f;
  s.extra_flops = one_pass > 0 ? (s.forwards - chain) / one_pass : 0.0;
}

std::optional<RecomputeSchedule> make_recompute_schedule(const std::string& policy,
                                                         const ChainCosts& c,
                                                         std::int64_t budget_bytes) {
  check_costs(c);
  const int n = c.size();
  if (policy == "none") return finish(c, policy, none_ops(n));
  if (policy == "full") return finish(c, policy, segment_ops(n, 1));
  if (policy == "sqrt")
    return finish(c, policy, segment_ops(n, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n))))));
  SHARDTRAIN_CHECK(policy == "budget", "unknown recompute policy " + policy);
  RecomputeSchedule none = finish(c, "budget", none_ops(n));
  if (none.peak_bytes <= budget_bytes) return none;
  SHARDTRAIN_CHECK(n <= kMaxBudgetLayers,
                   fmt::format("recompute.policy = \"budget\" plans chains of up to {} layers", kMaxBudgetLayers));
  const std::int64_t unit = none.input_bytes;
  // The DP bounds the memory held at any one time; the pools it needs can add up
  // to a little more, so step down until the simulated peak fits.
  for (std::int64_t units = (budget_bytes - c.scratch_bytes) / unit; units >= 1; --units) {
    auto s = solve_units(c, units);
    if (!s) return std::nullopt;  // fewer units cannot fit either
    if (s->peak_bytes <= budget_bytes) return s;
  }
  return std::nullopt;
}

std::int64_t min_recompute_peak(const ChainCosts& c) {
  check_costs(c);
  std::int64_t best = make_recompute_schedule("none", c)->peak_bytes;
  if (c.size() > kMaxBudgetLayers) return std::min(best, make_recompute_schedule("full", c)->peak_bytes);
  const std::int64_t unit = *std::max_element(c.output_bytes.begin(), c.output_bytes.end());
  const std::int64_t max_units = best / unit + 1;
  for (std::int64_t units = 1; units <= max_units; ++units)
    if (auto s = solve_units(c, units)) return std::min(best, s->peak_bytes);
  return best;
}

std::string format_schedule(const RecomputeSchedule& s) {
  const int n = static_cast<int>(s.kept_internals.size());
  auto list = [n](const std::vector<bool>& v) {
    std::string out;
    for (int i = 0; i < n; ++i)
      if (v[i]) {
        if (!out.empty()) out += ' ';
        out += std::to_string(i);
      }
    return out.empty() ? std::string("none") : out;
  };
  int recomputed = 0;
  for (std::size_t k = static_cast<std::size_t>(s.forward_ops_in_pass); k < s.ops.size(); ++k)
    if (s.ops[k].kind == RecomputeOp::Kind::Forward) ++recomputed;
  constexpr double kMiB = 1024.0 * 1024.0;
  std::string out = fmt::format("recompute plan: policy {}, {} blocks\n", s.policy, n);
  out += fmt::format("  blocks whose internals are kept in forward: {}\n", list(s.kept_internals));
  out += fmt::format("  block inputs kept as checkpoints:          {}\n", list(s.kept_inputs));
  out += fmt::format("  block forwards re-run in backward: {} (extra forward FLOPs {:.1f}% of one forward pass)\n",
                     recomputed, 100.0 * s.extra_flops);
  out += fmt::format("  block activation peak {:.3f} MiB: {} internals slots x {:.3f} MiB + {} checkpoint slots x {:.3f} MiB{}\n",
                     static_cast<double>(s.peak_bytes) / kMiB, s.internal_slots,
                     static_cast<double>(s.slot_bytes) / kMiB, s.input_slots,
                     static_cast<double>(s.input_bytes) / kMiB,
                     s.uses_scratch ? " + one scratch block" : "");
  return out;
}

}  // namespace shardtrain
