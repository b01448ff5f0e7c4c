// The recompute scheduler: fixed policies, the budget DP, and the op-list
// simulator every schedule is checked (and sized) with.
#include "model/recompute.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <unordered_map>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/memory.hpp"

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

std::int64_t gcd_of_sizes(const ChainCosts& c) {
  std::int64_t g = 0;
  for (int i = 0; i < c.size(); ++i) g = std::gcd(std::gcd(g, c.saved_bytes[i]), c.output_bytes[i]);
  return std::max<std::int64_t>(g, 1);
}

// Rotor-style DP over (s, t, m): the fewest forward FLOPs to run the backward of
// layers s..t, given x_s held below, the gradient of x_{t+1} at hand and m free
// units (bytes / g, g = gcd of every size, so the accounting is exact). Memo
// over the states reachable from the top (m = M minus sums of sizes).
class BudgetSolver {
 public:
  // Sizes are counted in whole units, rounded up (exact when unit divides them all).
  BudgetSolver(const ChainCosts& c, std::int64_t unit) : m_c(c), m_n(c.size()), m_unit(unit) {
    m_prefix.assign(m_n + 1, 0.0);
    for (int i = 0; i < m_n; ++i) m_prefix[i + 1] = m_prefix[i] + c.forward_flops[i];
  }
  double cost(int s, int t, std::int64_t m) { return solve(s, t, m).cost; }
  void emit(int s, int t, std::int64_t m, std::vector<Op>& ops) {
    const int sp = solve(s, t, m).choice;
    if (sp == 0) {
      ops.push_back(fwd(s, true));
      if (s < t) emit(s + 1, t, m - saved(s), ops);
      ops.push_back(bwd(s));
      return;
    }
    ops.push_back(fwd(s, false));
    for (int j = s + 1; j < sp; ++j) {
      ops.push_back(fwd(j, false));
      ops.push_back(free_input(j));
    }
    emit(sp, t, m - output(sp - 1), ops);
    ops.push_back(free_input(sp));
    emit(s, sp - 1, m, ops);
  }

 private:
  struct Entry {
    double cost;
    int choice;  // 0: keep s's internals (a leaf when s == t); s' > s: checkpoint x_{s'}
  };
  std::int64_t saved(int i) const { return (m_c.saved_bytes[i] + m_unit - 1) / m_unit; }
  std::int64_t output(int i) const { return (m_c.output_bytes[i] + m_unit - 1) / m_unit; }
  Entry solve(int s, int t, std::int64_t m) {
    if (m < 0) return {kInf, 0};
    const std::uint64_t key = (static_cast<std::uint64_t>(s) << 56) |
                              (static_cast<std::uint64_t>(t) << 48) | static_cast<std::uint64_t>(m);
    if (auto it = m_memo.find(key); it != m_memo.end()) return it->second;
    Entry best{kInf, 0};
    if (m >= saved(s)) best.cost = m_c.forward_flops[s] + (s == t ? 0.0 : solve(s + 1, t, m - saved(s)).cost);
    std::int64_t chain = 0;  // the largest checkpoint the forward chain s..s'-1 holds
    for (int sp = s + 1; sp <= t; ++sp) {
      chain = std::max(chain, output(sp - 1));
      if (chain > m) break;
      const double right = solve(sp, t, m - output(sp - 1)).cost;
      if (right == kInf) continue;
      const double total = m_prefix[sp] - m_prefix[s] + right + solve(s, sp - 1, m).cost;
      if (total < best.cost) best = {total, sp};
    }
    m_memo.emplace(key, best);
    return best;
  }
  const ChainCosts& m_c;
  int m_n;
  std::int64_t m_unit;
  std::vector<double> m_prefix;
  std::unordered_map<std::uint64_t, Entry> m_memo;
};

constexpr int kMaxBudgetLayers = 64;
constexpr std::int64_t kMaxUnits = 1024;  // memory resolution of the budget DP

void check_costs(const ChainCosts& c) {
  SHARDTRAIN_CHECK(c.size() > 0, "recompute: empty chain");
  SHARDTRAIN_CHECK(c.output_bytes.size() == c.saved_bytes.size() &&
                       c.forward_flops.size() == c.saved_bytes.size(),
                   "recompute: cost vectors of different lengths");
  for (int i = 0; i < c.size(); ++i)
    SHARDTRAIN_CHECK(c.output_bytes[i] > 0 && c.saved_bytes[i] >= c.output_bytes[i],
                     "recompute: a layer must save at least its output");
}

RecomputeSchedule finish(const ChainCosts& c, RecomputePolicy policy, std::vector<Op> ops) {
  RecomputeSchedule s;
  s.policy = name_of(policy);
  s.ops = std::move(ops);
  simulate(c, s);
  return s;
}

// The budget schedule for `bytes` of stack (the scratch block not included), or
// nullopt when none fits.
std::optional<RecomputeSchedule> solve_bytes(const ChainCosts& c, std::int64_t bytes) {
  // Exact in units of the gcd of all sizes while that keeps the table small;
  // otherwise coarser units, sizes rounded up: still feasible, at most about
  // (live regions) x unit short of optimal (make_recompute_schedule also tries
  // sqrt and full).
  std::int64_t unit = gcd_of_sizes(c);
  if (bytes / unit > kMaxUnits) unit = (bytes + kMaxUnits - 1) / kMaxUnits;
  const std::int64_t units = bytes / unit;
  if (units < 1) return std::nullopt;
  BudgetSolver solver(c, unit);
  if (solver.cost(0, c.size() - 1, units) == kInf) return std::nullopt;
  std::vector<Op> ops;
  solver.emit(0, c.size() - 1, units, ops);
  return finish(c, RecomputePolicy::Budget, std::move(ops));
}

}  // namespace

void simulate(const ChainCosts& c, RecomputeSchedule& s) {
  check_costs(c);
  const int n = c.size();
  // The stack: (internals of layer i: kind 'I', checkpoint x_j: kind 'X').
  struct Region { char kind; int index; std::int64_t bytes; };
  std::vector<Region> stack;
  std::vector<char> ck(n + 1, 0), internals(n, 0);
  std::int64_t height = 0;
  s.kept_inputs.assign(n, false);
  s.kept_internals.assign(n, false);
  s.slot_bytes = *std::max_element(c.saved_bytes.begin(), c.saved_bytes.end());
  s.input_bytes = *std::max_element(c.output_bytes.begin(), c.output_bytes.end());
  int live_int = 0, live_ck = 0, next_backward = n - 1;
  s.internal_slots = s.input_slots = 0;
  s.uses_scratch = false;
  s.stack_bytes = 0;
  s.forward_ops_in_pass = -1;
  s.forwards = 0;
  auto has_input = [&](int i) { return i == 0 || ck[i] || internals[i - 1]; };
  auto where = [&](std::size_t k) { return fmt::format("recompute schedule op {}", k); };
  auto push = [&](char kind, int index, std::int64_t bytes) {
    stack.push_back({kind, index, bytes});
    height += bytes;
    s.stack_bytes = std::max(s.stack_bytes, height);
  };
  auto pop = [&](char kind, int index, std::size_t k) {
    SHARDTRAIN_CHECK(!stack.empty() && stack.back().kind == kind && stack.back().index == index,
                     where(k) + fmt::format(": {} {} is not on top of the activation stack (frees must be LIFO)",
                                            kind == 'I' ? "internals of layer" : "checkpoint x_", index));
    height -= stack.back().bytes;
    stack.pop_back();
  };
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
          push('I', i, c.saved_bytes[i]);
          s.internal_slots = std::max(s.internal_slots, ++live_int);
        } else {
          SHARDTRAIN_CHECK(!ck[i + 1], where(k) + ": checkpoint computed twice");
          s.uses_scratch = true;
          // The output waits in the scratch block while the input, if it is
          // freed next and on top, goes first (forward_frees_input).
          if (forward_frees_input(s.ops, k)) {
            pop('X', i, k + 1);
            ck[i] = 0;
            --live_ck;
            ++k;  // that FreeInput is done
          }
          ck[i + 1] = 1;
          push('X', i + 1, c.output_bytes[i]);
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
        pop('I', i, k);
        internals[i] = 0;
        --live_int;
        --next_backward;
        break;
      }
      case Kind::FreeInput: {
        SHARDTRAIN_CHECK(op.layer >= 1 && ck[op.layer], where(k) + ": freeing an input that is not held");
        pop('X', op.layer, k);
        ck[op.layer] = 0;
        --live_ck;
        break;
      }
    }
  }
  SHARDTRAIN_CHECK(next_backward == -1, "recompute schedule: not every layer has a backward");
  SHARDTRAIN_CHECK(live_int == 0 && live_ck == 0, "recompute schedule: slots left held at the end");
  s.peak_bytes = s.stack_bytes + (s.uses_scratch ? c.scratch_bytes : 0);
  double one_pass = c.other_forward_flops;
  for (double f : c.forward_flops) one_pass += f;
  double chain = 0;
  for (double f : c.forward_flops) chain += f;
  s.extra_flops = one_pass > 0 ? (s.forwards - chain) / one_pass : 0.0;
}

bool forward_frees_input(const std::vector<RecomputeOp>& ops, std::size_t k) {
  const RecomputeOp& op = ops[k];
  return op.kind == Kind::Forward && !op.keep && op.layer >= 1 && k + 1 < ops.size() &&
         ops[k + 1].kind == Kind::FreeInput && ops[k + 1].layer == op.layer;
}

std::optional<RecomputeSchedule> make_recompute_schedule(RecomputePolicy policy,
                                                         const ChainCosts& c,
                                                         std::int64_t budget_bytes) {
  check_costs(c);
  const int n = c.size();
  switch (policy) {
    case RecomputePolicy::None:
      return finish(c, policy, none_ops(n));
    case RecomputePolicy::Full:
      return finish(c, policy, segment_ops(n, 1));
    case RecomputePolicy::Sqrt:
      return finish(c, policy, segment_ops(n, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n))))));
    case RecomputePolicy::Budget:
      break;
  }
  SHARDTRAIN_CHECK(policy == RecomputePolicy::Budget,
                   fmt::format("unknown recompute policy {}", static_cast<int>(policy)));
  RecomputeSchedule none = finish(c, policy, none_ops(n));
  if (none.peak_bytes <= budget_bytes) return none;
  SHARDTRAIN_CHECK(n <= kMaxBudgetLayers,
                   fmt::format("recompute.policy = \"budget\" plans chains of up to {} layers", kMaxBudgetLayers));
  if (budget_bytes <= c.scratch_bytes) return std::nullopt;
  std::optional<RecomputeSchedule> best = solve_bytes(c, budget_bytes - c.scratch_bytes);
  // The fixed policies are schedules too: never do worse than one that fits.
  for (const RecomputePolicy fixed : {RecomputePolicy::Sqrt, RecomputePolicy::Full}) {
    RecomputeSchedule f = *make_recompute_schedule(fixed, c);
    if (f.peak_bytes > budget_bytes) continue;
    if (!best || f.forwards < best->forwards ||
        (f.forwards == best->forwards && f.peak_bytes < best->peak_bytes)) {
      f.policy = name_of(RecomputePolicy::Budget);
      best = std::move(f);
    }
  }
  return best;
}

std::int64_t min_recompute_peak(const ChainCosts& c) {
  check_costs(c);
  const std::int64_t none = make_recompute_schedule(RecomputePolicy::None, c)->peak_bytes;
  if (c.size() > kMaxBudgetLayers)
    return std::min(none, make_recompute_schedule(RecomputePolicy::Full, c)->peak_bytes);
  // Bisect on the budget make_recompute_schedule itself accepts (feasible at
  // none's peak), so a budget of the returned size is always met.
  std::int64_t lo = 0, hi = none;
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (make_recompute_schedule(RecomputePolicy::Budget, c, mid)) hi = mid;
    else lo = mid;
  }
  return hi;
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
  std::string out = fmt::format("recompute plan: policy {}, {} blocks\n", s.policy, n);
  out += fmt::format("  blocks whose internals are kept in forward: {}\n", list(s.kept_internals));
  out += fmt::format("  block inputs kept as checkpoints:          {}\n", list(s.kept_inputs));
  out += fmt::format("  block forwards re-run in backward: {} (extra forward FLOPs {:.1f}% of one forward pass)\n",
                     recomputed, 100.0 * s.extra_flops);
  out += fmt::format("  block activation peak {:.3f} MiB: at most {} blocks' internals ({:.3f} MiB each) and {} "
                     "checkpoints ({:.3f} MiB each) held{}\n",
                     static_cast<double>(s.peak_bytes) / kMiB, s.internal_slots,
                     static_cast<double>(s.slot_bytes) / kMiB, s.input_slots,
                     static_cast<double>(s.input_bytes) / kMiB,
                     s.uses_scratch ? ", plus one scratch block" : "");
  return out;
}

}  // namespace shardtrain
