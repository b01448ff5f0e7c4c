#!/usr/bin/python3
"""Measured wire bytes == the wire model, exactly, per rank.

Runs tests/mpi/parallel/wire_probe once per kind of collective (at the sizes
below, several not dividing by the rank count) under Open MPI's pml
monitoring dump (OMPI_MCA_pml_monitoring_enable=1, enable_output=3,
filename=DIR/prof: each rank writes DIR/prof.<rank>.prof at MPI_Finalize,
one 'E' line per peer with the bytes it sent, collectives' internal messages
included). Prints per rank: measured, model, payload; fails when measured !=
model on any rank or when a call was not modelled.

usage: wire_check.py MPIEXEC NPFLAG NP PROBE [KIND...]
WIRE_CHECK_PLANT=N adds N bytes to rank 0's measured figure (a planted
error: the check must fail).
"""
import os
import subprocess
import sys
import tempfile

KINDS = {
    "all_reduce": [1, 3, 1025, 3001, 8193, 16385, 65537, 262147],
    "broadcast": [1, 7, 25, 130, 1025, 3000, 16385, 40000, 65537, 262147],
    "barrier": [0],
    "reduce_scatter": [1, 3, 7, 25, 1025, 2047, 4097, 65537, 262147],
    "all_gather": [1, 7, 1025, 65537, 262147],
    "iall_reduce": [1, 1025, 65537, 262147],
    "ireduce_scatter": [1, 1025, 65537],
    "iall_gather": [1, 1025, 65537],
    "ireduce_scatter_v": [1, 1025, 65537],
    "iall_gather_v": [1, 1025, 65537],
}


def measured(prefix, np_):
    out = []
    for r in range(np_):
        total = 0
        path = f"{prefix}.{r}.prof"
        if os.path.exists(path):
            for line in open(path):
                f = line.rstrip("\n").split("\t")
                if f[0] == "E":
                    total += int(f[3].split()[0])
        elif np_ > 1:
            sys.exit(f"no monitoring dump {path}: is OMPI_MCA_pml_monitoring_enable honoured?")
        out.append(total)
    return out


def main():
    mpiexec, npflag, np_, probe = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    kinds = sys.argv[5:] or list(KINDS)
    plant = int(os.environ.get("WIRE_CHECK_PLANT", "0"))
    bad = False
    for kind in kinds:
        with tempfile.TemporaryDirectory(prefix="wire_check_") as d:
            env = dict(os.environ, OMPI_MCA_pml_monitoring_enable="1", OMPI_MCA_pml_monitoring_enable_output="3",
                       OMPI_MCA_pml_monitoring_filename=f"{d}/prof")
            cmd = [mpiexec, npflag, str(np_), probe, kind, d] + [str(c) for c in KINDS[kind]]
            p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0:
                print(p.stdout)
                sys.exit(f"{' '.join(cmd)} exited with {p.returncode}")
            meas = measured(f"{d}/prof", np_)
            meas[0] += plant
            rows = [open(f"{d}/model.{r}").read().split(" ", 4) for r in range(np_)]
        print(f"{kind} at {np_} ranks, F32 counts {KINDS[kind]}: {rows[0][4].strip()}")
        for r in range(np_):
            payload, model, unmodelled = int(rows[r][1]), int(rows[r][2]), int(rows[r][3])
            ok = meas[r] == model and unmodelled == 0
            bad |= not ok
            print(f"  rank {r}: measured {meas[r]} B {'==' if meas[r] == model else '!='} model {model} B"
                  f" | payload {payload} B" + (f" | {unmodelled} calls not modelled" if unmodelled else "")
                  + ("" if ok else "   <-- MISMATCH"))
    sys.exit(1 if bad else 0)


main()
