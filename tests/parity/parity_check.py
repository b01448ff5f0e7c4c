"""Shared verdict of the parity scripts (gpt_parity.py, classifier_parity.py):
the tolerances, the per-tensor gradient comparison and the exit code."""
import sys

import numpy as np

LOSS_TOL, GRAD_TOL = 1e-5, 1e-4


def compare_loss(label, ours, torch_loss, bad):
    """Prints ours against torch; appends "loss" to bad beyond LOSS_TOL (relative)."""
    rel = abs(ours - torch_loss) / abs(torch_loss)
    print(f"{label}loss ours {ours:.9f}, torch {torch_loss:.9f}, relative difference {rel:.2e} (tol {LOSS_TOL})")
    if not rel <= LOSS_TOL:
        bad.append("loss")


def compare_grads(pairs, bad):
    """pairs: (name, ours, torch) per tensor. The relative difference is
    max |ours - torch| / max |torch| (max |ours| when torch's is 0); names beyond
    GRAD_TOL go to bad. Returns [(rel, name, max |torch|)], worst first."""
    rows = []
    for name, ours, ref in pairs:
        ours, ref = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        scale = np.abs(ref).max()
        rel = np.abs(ours - ref).max() / scale if scale > 0 else np.abs(ours).max()
        rows.append((rel, name, scale))
        if not rel <= GRAD_TOL:
            bad.append(name)
    rows.sort(reverse=True)
    return rows


def verdict(bad):
    """Exit code 1 and the names when anything is outside tolerance, else 0."""
    if bad:
        print("FAIL: outside tolerance: " + ", ".join(bad))
        return 1
    print("parity: loss and every gradient agree with PyTorch")
    return 0


def run(main, doc):
    """The scripts' entry point: one argument, the dump file."""
    if len(sys.argv) != 2:
        raise SystemExit(doc)
    sys.exit(main(sys.argv[1]))
