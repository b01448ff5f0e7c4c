#!/usr/bin/python3
"""Bytes on the wire per rank and per training step, measured, beside the
payload, the wire model and ZeRO's theory.

usage: wire_table.py LOG_A DUMP_A LOG_B DUMP_B [--extra-payload BYTES]

LOG_A and LOG_B are the trainer's output (with the RUN_DIR/report.txt each names) of two runs identical but for
train.steps (A: S steps, B: S + k, k > 0), each run with Open MPI's pml
monitoring dump in its own directory:
  OMPI_MCA_pml_monitoring_enable=1 OMPI_MCA_pml_monitoring_enable_output=3 \\
  OMPI_MCA_pml_monitoring_filename=DUMP_A/prof mpiexec -n N trainer ...
(DUMP_A/prof.<rank>.prof: one 'E' line per peer with the bytes the rank sent
through the PML, collectives' internal messages included, from MPI_Init to
MPI_Finalize.) Start-up, the final evaluation and the end-of-run reports are
the same in both runs, so per rank

  measured per step = (dump bytes of B - dump bytes of A) / k
  model per step    = (B's "total model" - A's "total model") / k

and the two must be equal exactly: a collective that escaped the
communicator's tally (a raw MPI call in the training loop), or one the model
prices wrongly, shows here. The difference covers the whole training loop:
the training step the trainer's per-step table reports, plus what the loop
runs around it (the stop/checkpoint agreement, an all-reduce of two int64;
the weights CRC, an all-reduce of 2 N int64 on each logged row).
--extra-payload BYTES: the loop's payload per step beyond the training step
must be exactly BYTES (16 + 16 N with train.log_every = 1).

Fails (exit 1) when a rank's measured != model, when a call was not modelled,
or when the extra payload differs. WIRE_TABLE_PLANT=R:B adds B bytes to rank
R's dump of run B (a planted error: the check must fail).
"""
import os
import re
import sys


def parse_log(path):
    text = open(path).read()
    # The end-of-run report is in RUN_DIR/report.txt, named by the log's summary.
    for report in dict.fromkeys(re.findall(r"^  full report: (\S+/report\.txt) \(", text, re.M)):
        try:
            text += open(report).read()
        except OSError:
            pass
    m = re.search(r"^communication layout: (\d+) ranks, stage (\d+),", text, re.M)
    if not m:
        sys.exit(f"{path}: no 'communication layout' line (did the run train a step?)")
    n, stage = int(m.group(1)), int(m.group(2))
    m = re.search(r"^communication per step per rank \((\d+) steps", text, re.M)
    steps = int(m.group(1))
    per_step, totals, algos = {}, {}, []
    for m in re.finditer(r"^  rank (\d+): payload ([\d.]+) B/step \[[^]]*\] \| ring ([\d.]+) B/step"
                         r"(?: \| model ([\d.]+) B/step \[[^]]*\]( \(\d+ calls not modelled\))?)?"
                         r" \| ZeRO theory ([\d.]+) B/step$", text, re.M):
        per_step[int(m.group(1))] = {"payload": float(m.group(2)), "ring": float(m.group(3)),
                                     "model": None if m.group(4) is None else float(m.group(4)),
                                     "theory": float(m.group(6))}
    for m in re.finditer(r"^  rank (\d+): total payload (\d+) B \| total model (\d+) B \| not modelled (\d+) calls$",
                         text, re.M):
        totals[int(m.group(1))] = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
    for m in re.finditer(r"^  model != ring for (\w+): (.*)$", text, re.M):
        algos.append((m.group(1), m.group(2)))
    status = re.search(r"^  (wire model: .*)$", text, re.M)
    if sorted(per_step) != list(range(n)) or sorted(totals) != list(range(n)):
        sys.exit(f"{path}: expected the per-step and total lines of {n} ranks")
    return {"n": n, "stage": stage, "steps": steps, "per_step": per_step, "totals": totals, "algos": algos,
            "status": status.group(1) if status else ""}


def dump_bytes(directory, n):
    out = []
    for r in range(n):
        path = os.path.join(directory, f"prof.{r}.prof")
        if not os.path.exists(path):
            if n > 1:
                sys.exit(f"no monitoring dump {path}: was the run started with OMPI_MCA_pml_monitoring_enable=1 "
                         f"OMPI_MCA_pml_monitoring_enable_output=3 OMPI_MCA_pml_monitoring_filename={directory}/prof?")
            out.append(0)
            continue
        total = 0
        for line in open(path):
            f = line.rstrip("\n").split("\t")
            if f[0] == "E":
                total += int(f[3].split()[0])
        out.append(total)
    return out


def fmt(v):
    return f"{v:.0f}" if v == int(v) else f"{v:.2f}"


def main():
    args = sys.argv[1:]
    extra = None
    if "--extra-payload" in args:
        i = args.index("--extra-payload")
        extra = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 4:
        sys.exit(__doc__)
    a, b = parse_log(args[0]), parse_log(args[2])
    if (a["n"], a["stage"]) != (b["n"], b["stage"]):
        sys.exit("the two runs differ in rank count or ZeRO stage")
    k = b["steps"] - a["steps"]
    if k <= 0:
        sys.exit(f"run B must train more steps than run A ({b['steps']} vs {a['steps']})")
    n = a["n"]
    if "wire model: bytes" not in b["status"]:
        sys.exit(f"no wire model for this backend: {b['status']}")
    meas_a, meas_b = dump_bytes(args[1], n), dump_bytes(args[3], n)
    plant = os.environ.get("WIRE_TABLE_PLANT")
    if plant:
        r, v = plant.split(":")
        meas_b[int(r)] += int(v)
    print(f"bytes on the wire per rank per training step, {n} ranks, ZeRO stage {a['stage']}: "
          f"runs of {a['steps']} and {b['steps']} steps, difference / {k}")
    print("  payload: bytes handed to MPI in the training step; ring: what ring algorithms send for it; "
          "measured: Open MPI pml monitoring dump; model: the communicator's wire model; both over the "
          "training loop (the step + stop agreement + weights CRC)")
    bad = False
    for r in range(n):
        pa, ma, ua = a["totals"][r]
        pb, mb, ub = b["totals"][r]
        meas = meas_b[r] - meas_a[r]
        model = mb - ma
        loop_payload = (pb - pa) / k
        step = b["per_step"][r]
        ok = meas == model and ua == 0 and ub == 0
        note = ""
        if ua or ub:
            note += f"   <-- {ua} / {ub} calls not modelled"
        if meas != model:
            note += "   <-- MEASURED != MODEL"
        if extra is not None and loop_payload - step["payload"] != extra:
            ok = False
            note += f"   <-- loop payload beyond the step {fmt(loop_payload - step['payload'])} B, expected {extra} B"
        bad |= not ok
        step_model = "" if step["model"] is None else f", step {fmt(step['model'])} + loop {fmt(model / k - step['model'])}"
        print(f"  rank {r}: payload {fmt(step['payload'])} B | ring {fmt(step['ring'])} B | measured {fmt(meas / k)} B "
              f"{'==' if meas == model else '!='} model {fmt(model / k)} B{step_model} | "
              f"ZeRO theory {fmt(step['theory'])} B{note}")
    for kind, names in b["algos"]:
        print(f"  {kind}: the algorithm used sends other than the ring figure: {names}")
    if not b["algos"] and n > 1:
        print("  every kind: the model equals the ring figure")
    if bad:
        print("wire_table: FAILED: see the rows marked <--")
    sys.exit(1 if bad else 0)


main()
