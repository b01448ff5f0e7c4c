#!/usr/bin/python3
"""Exact per-rank payload of a training step of the tiny GPT, recomputed from the
layout the trainer prints ('communication layout: ...') and ZeRO's schedule
(src/parallel/zero_engine.cpp, src/model/gpt.cpp), then compared with every rank's
'rank R: payload ... [...]' line. Independent of the engine's counters.

usage: comm_expect.py LOG N_LAYER [--drop-cached] [--full-gather-payload]
The two flags plant errors (to show the check fails): --drop-cached gathers
every group at every use (no stage-3 cache); --full-gather-payload counts an
all-gather's payload as the whole gathered buffer.

Per step, payload (bytes handed to MPI, communicator.hpp) per kind, e = element
bytes, Psi = padded size, S = Psi / N, M micro-batches, B buckets:
  stage 0: all_reduce 2 calls: the gradient (Psi e) + the loss (8)
  stage 1: reduce_scatter 1 call Psi e; all_reduce 2 calls 16 (grad norm, loss);
           all_gather 1 call S e
  stage 2: reduce_scatter M B calls, M * (sum of bucket sizes) e; all_reduce 2
           calls 16; all_gather 1 call S e
  stage 3: reduce_scatter as stage 2; all_reduce 2 calls 16; all_gather: one
           call per gather, the rank's part of the bucket; gathers simulated
           over the 3-buffer pool (LRU, empty first; prefetch only into an
           unused buffer) with the model's acquire/prefetch/release order.
"""
import re
import sys


def buckets_of(groups, bucket_mb, esize):
    cap = bucket_mb * 1024.0 * 1024.0 / esize
    spans = []  # [first, last]
    for g in range(len(groups)):
        if spans and groups[g][1] - groups[spans[-1][0]][0] <= cap:
            spans[-1][1] = g
            continue
        spans.append([g, g])
    return [(groups[a][0], groups[b][1], a, b) for a, b in spans]


def gathers(groups, buckets, n_layer, micro, drop_cached):
    """Bucket indices gathered in one step (stage 3), in order."""
    span_of = {}
    for s, (_, _, a, b) in enumerate(buckets):
        for g in range(a, b + 1):
            span_of[g] = s
    sizes = sorted((hi - lo for lo, hi, _, _ in buckets), reverse=True)
    pool = [{"size": sizes[min(i, 1)], "span": -1, "users": 0, "order": 0} for i in range(min(3, len(sizes)))]
    clock = [0]
    out = []

    def find(s):
        for b in pool:
            if b["span"] == s:
                return b
        return None

    def take(s):
        need = buckets[s][1] - buckets[s][0]
        best = None
        for b in pool:
            if b["users"] > 0 or b["size"] < need:
                continue
            if (best is None or (best["span"] >= 0 and b["span"] < 0) or
                    ((best["span"] >= 0) == (b["span"] >= 0) and b["order"] < best["order"])):
                best = b
        assert best is not None, "no parameter buffer free"
        clock[0] += 1
        best["span"], best["order"] = s, clock[0]
        out.append(s)
        return best

    def prefetch(g):
        if g < 0 or g >= len(groups):
            return
        s = span_of[g]
        if find(s):
            return
        need = buckets[s][1] - buckets[s][0]
        if not any(b["users"] == 0 and b["size"] >= need for b in pool):
            return
        take(s)

    def acquire(g):
        s = span_of[g]
        b = find(s)
        if drop_cached and b is not None and b["users"] == 0:
            b["span"] = -1  # planted error: forget what the buffer holds
            b = None
        if b is None:
            b = take(s)
        b["users"] += 1
        clock[0] += 1
        b["order"] = clock[0]

    def release(g):
        find(span_of[g])["users"] -= 1

    L, lnf = n_layer, n_layer + 1
    for _ in range(micro):
        # Gpt::forward (recompute "none": every block kept)
        acquire(0)
        prefetch(1)
        for l in range(L):
            acquire(l + 1)
            prefetch(l + 2 if l + 1 < L else lnf)
            release(l + 1)
        acquire(lnf)
        release(lnf)
        release(0)
        # Gpt::backward: the head, the final LayerNorm, the blocks in reverse
        acquire(0)
        release(0)
        acquire(lnf)
        prefetch(L)
        release(lnf)
        for l in reversed(range(L)):
            acquire(l + 1)
            if l > 0:
                prefetch(l)
            release(l + 1)
    return out


def expected(n, rank, stage, esize, bucket_mb, micro, padded, groups, n_layer, drop_cached, full_gather):
    shard = padded // n
    lo_r, hi_r = rank * shard, (rank + 1) * shard
    kinds = {"all_reduce": [2, 16]}
    if stage == 0:
        kinds["all_reduce"] = [2, padded * esize + 8]
    elif stage == 1:
        kinds["reduce_scatter"] = [1, padded * esize]
        kinds["all_gather"] = [1, (padded if full_gather else shard) * esize]
    else:
        buckets = buckets_of(groups, bucket_mb, esize)
        kinds["reduce_scatter"] = [micro * len(buckets), micro * sum(hi - lo for lo, hi, _, _ in buckets) * esize]
        if stage == 2:
            kinds["all_gather"] = [1, (padded if full_gather else shard) * esize]
        else:
            seq = gathers(groups, buckets, n_layer, micro, drop_cached)
            own = lambda s: max(0, min(buckets[s][1], hi_r) - max(buckets[s][0], lo_r))
            full = lambda s: buckets[s][1] - buckets[s][0]
            kinds["all_gather"] = [len(seq), sum((full(s) if full_gather else own(s)) * esize for s in seq)]
    order = ["all_reduce", "broadcast", "reduce_scatter", "all_gather", "barrier"]
    parts = [f"{k} {kinds[k][0]}x {kinds[k][1]} B" for k in order if k in kinds]
    return sum(v[1] for v in kinds.values()), ", ".join(parts)


def main():
    log, n_layer = sys.argv[1], int(sys.argv[2])
    drop_cached = "--drop-cached" in sys.argv
    full_gather = "--full-gather-payload" in sys.argv
    text = open(log).read()
    # The end-of-run report is in RUN_DIR/report.txt, named by the log's summary.
    for report in dict.fromkeys(re.findall(r"^  full report: (\S+/report\.txt) \(", text, re.M)):
        try:
            text += open(report).read()
        except OSError:
            pass
    m = re.search(r"^communication layout: (\d+) ranks, stage (\d), (\d+) bytes per element, bucket_mb (\S+), "
                  r"(\d+) micro-batch\(es\) per step, padded (\d+), groups((?: \d+:\d+-\d+)+)$", text, re.M)
    if not m:
        sys.exit("no 'communication layout' line in " + log)
    n, stage, esize, bucket_mb, micro, padded = (int(m[1]), int(m[2]), int(m[3]), float(m[4]), int(m[5]), int(m[6]))
    groups = [tuple(int(x) for x in g.split(":")[1].split("-")) for g in m[7].split()]
    lines = dict(re.findall(r"^  rank (\d+): payload (\S+ B/step \[[^]]*\])", text, re.M))
    bad = len(lines) != n
    if bad:
        print(f"expected {n} rank lines, got {len(lines)}")
    for r in range(n):
        total, parts = expected(n, r, stage, esize, bucket_mb, micro, padded, groups, n_layer, drop_cached,
                                full_gather)
        want = f"{total} B/step [{parts}]"
        got = lines.get(str(r), "(none)")
        ok = got == want
        bad |= not ok
        print(f"rank {r}: payload {got} {'==' if ok else '!= expected'} {want if not ok else ''}".rstrip())
    sys.exit(1 if bad else 0)


main()
