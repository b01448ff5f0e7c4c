#!/usr/bin/python3
"""shardtrain's convolutional classifier in PyTorch (issue 33's reference).

The network is src/model/cnn.cpp's, layer for layer and parameter for
parameter (the names are ours: conv.<i>.{weight (O, I, K, K), bias},
fc.<j>.{weight (out, in), bias}): per conv, Conv2d (stride 1, zero padding
--padding) + ReLU + MaxPool2d(--pool) (none when --pool is 1); flatten (C, H,
W order); per hidden width, Linear + ReLU + inverted dropout (--dropout,
training only); a last Linear to the classes; the loss is the mean
cross-entropy over the batch. The weights start He-normal (std sqrt(2 /
fan_in), fan_in = the weight's elements / its first dimension) and the biases
at 0, as src/model/param_init.cpp's he_normal_init (not the same draws).
inputs/mnist_cnn.toml is conv 5x5x20, pool 2, conv 5x5x50, pool 2, fc 500,
dropout 0.5, batch 128: --conv-channels 20 50 --kernel 5 --padding 0 --pool 2
--hidden 500 --dropout 0.5 --batch 128 (the defaults).

Usage (Debian's python3-torch and python3-h5py, through /usr/bin/python3):
  cnn_torch.py train DATA.h5 --batch B --steps N [--conv-channels C1 C2 ...]
               [--kernel K] [--padding P] [--pool S] [--hidden H ...] [--dropout D]
               [--threads T] [--lr LR] [--beta1 B1] [--beta2 B2] [--eps E]
               [--weight-decay W] [--grad-clip G] [--seed S] [--precision fp32|bf16]
               [--ddp] [--parallel-info]
    Trains on a shardtrain image data set (format "shardtrain-samples", kind
    "image", written by `trainer-data mnist`; share/doc/dataset-format.md):
    the whole /train split is read into memory once as uint8 (what
    torchvision's MNIST does), and each step takes the next B images of a
    random permutation of it (a new one per epoch; it depends on --seed only),
    as float pixel / 255 (the trainer's reader's scaling). AdamW as
    inputs/mnist_cnn.toml's (betas 0.9/0.999, eps 1e-8, weight decay 0.01 on
    the weights, none on the biases) at a constant --lr; --grad-clip > 0 clips
    the global gradient norm (the toml's 0 turns it off, as ours).
    --precision bf16: torch.autocast("cpu", bfloat16) over fp32 weights, as
    PyTorch users train in bf16 on a CPU (convolutions and Linear run in bf16
    on oneDNN); fp16 autocast is not offered on the CPU by PyTorch 1.13.
    Prints a "config ..." line, one line per step, "step S loss L ms M end E"
    (M: perf_counter around the data, forward, backward, clip and optimizer
    step; E: the wall clock at the step's end, s since 1970), and at the end
    "idle_rss_kib K" (VmRSS before the model was built: imports and data) and
    "peak_rss_kib K" (getrusage's maximum resident set).
    --ddp: DistributedDataParallel over gloo, started as torchrun starts its
    workers (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment);
    each of the N processes takes B/N of the step's images, rank 0 prints the
    steps, every process its two RSS lines. --parallel-info prints
    torch.__config__.parallel_info(), each line prefixed "parallel_info ", and
    then "parallel_info OpenBLAS core: C" (openblas_get_corename of the OpenBLAS
    this process maps: the kernels of its fp32 GEMMs).
    This is the PyTorch side of tests/bench/torch_parity_speed.sh's cnn model;
    share/reference/gpt_torch.py is the GPT's, with the same conventions.
"""
import argparse
import os
import resource
import sys
import time

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from gpt_torch import openblas_core  # this process's OpenBLAS core, for --parallel-info


class Cnn(nn.Module):
    """src/model/cnn.cpp's forward: [conv + ReLU + max-pool] per conv, flatten,
    [Linear + ReLU + dropout] per hidden width, Linear."""

    def __init__(self, in_shape, classes, conv_channels, kernel, padding, pool, hidden, dropout):
        super().__init__()
        c, h, w = in_shape
        self.pool, self.dropout = pool, dropout
        self.conv = nn.ModuleList()
        for out in conv_channels:
            self.conv.append(nn.Conv2d(c, out, kernel, stride=1, padding=padding))
            c, h, w = out, h + 2 * padding - kernel + 1, w + 2 * padding - kernel + 1
            if h < 1 or w < 1:
                raise SystemExit(f"conv.{len(self.conv) - 1}: a {kernel}x{kernel} kernel with padding {padding} "
                                 "does not fit its input")
            if pool > 1:
                h, w = h // pool, w // pool
                if h < 1 or w < 1:
                    raise SystemExit(f"the {pool}x{pool} max-pool after conv.{len(self.conv) - 1} does not fit")
        self.fc = nn.ModuleList()
        width = c * h * w
        for out in hidden + [classes]:
            self.fc.append(nn.Linear(width, out))
            width = out

    def forward(self, x, labels):
        for conv in self.conv:
            x = F.relu(conv(x))
            if self.pool > 1:
                x = F.max_pool2d(x, self.pool, self.pool)
        x = x.flatten(1)
        for fc in self.fc[:-1]:
            x = F.dropout(F.relu(fc(x)), self.dropout, self.training)
        return F.cross_entropy(self.fc[-1](x), labels)


def he_normal_(model):
    """Weights N(0, 2 / fan_in), biases 0: src/model/param_init.cpp's scheme."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".weight"):
                p.normal_(0.0, (2.0 / (p.numel() // p.shape[0])) ** 0.5)
            else:
                p.zero_()


def rss_kib():
    """The process's resident set now (VmRSS of /proc/self/status), KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit("/proc/self/status has no VmRSS line")


def text_attr(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def load_images(path):
    """(uint8 images (N, C, H, W), int64 labels (N), classes) of /train."""
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise SystemExit(f"{path}: cannot open as HDF5: {e}")
    with f:
        fmt = text_attr(f.attrs.get("format", ""))
        if fmt != "shardtrain-samples" or text_attr(f.attrs.get("kind", "")) != "image":
            raise SystemExit(f"{path}: not a shardtrain image data set (format '{fmt}', kind "
                             f"'{text_attr(f.attrs.get('kind', ''))}'; expected 'shardtrain-samples', 'image')")
        images = np.asarray(f["train/inputs"])
        labels = np.asarray(f["train/labels"]).astype(np.int64)
        classes = int(f.attrs["num_classes"])
    if images.dtype != np.uint8 or images.ndim != 4:
        raise SystemExit(f"{path}: /train/inputs is {images.dtype} of rank {images.ndim}, expected uint8 (N, C, H, W)")
    return torch.from_numpy(images), torch.from_numpy(labels), classes


def train(argv):
    ap = argparse.ArgumentParser(prog="cnn_torch.py train")
    ap.add_argument("data")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--conv-channels", type=int, nargs="+", default=[20, 50])
    ap.add_argument("--kernel", type=int, default=5)
    ap.add_argument("--padding", type=int, default=0)
    ap.add_argument("--pool", type=int, default=2)
    ap.add_argument("--hidden", type=int, nargs="*", default=[500])
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--grad-clip", type=float, default=0.0, help="global gradient-norm clip; 0: off")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"),
                    help="fp32, or autocast to bf16 over fp32 weights")
    ap.add_argument("--ddp", action="store_true",
                    help="DistributedDataParallel over gloo, initialized from the environment torchrun sets "
                         "(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): each process takes B/N of the step's images")
    ap.add_argument("--parallel-info", action="store_true",
                    help="print torch.__config__.parallel_info() (prefixed 'parallel_info ') before training")
    a = ap.parse_args(argv)
    if a.batch < 1 or a.steps < 1:
        raise SystemExit("--batch and --steps must be >= 1")
    if not 0.0 <= a.dropout < 1.0:
        raise SystemExit(f"--dropout {a.dropout}: must be in [0, 1)")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rank, world = 0, 1
    if a.ddp:
        import torch.distributed as dist
        if "RANK" not in os.environ:
            raise SystemExit("--ddp: no RANK in the environment; start N processes with RANK, WORLD_SIZE, "
                             "MASTER_ADDR and MASTER_PORT set (what torchrun sets; Debian 12's torchrun "
                             "1.13 fails under Python 3.11)")
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        if a.batch % world:
            raise SystemExit(f"--ddp: --batch {a.batch} is not a multiple of the {world} processes")
    if a.parallel_info and rank == 0:
        for line in torch.__config__.parallel_info().splitlines():
            print("parallel_info " + line.replace("\t", "  "), flush=True)
        print("parallel_info OpenBLAS core: " + openblas_core(), flush=True)
    images, labels, classes = load_images(a.data)
    n = images.shape[0]
    if n < a.batch:
        raise SystemExit(f"{a.data}: {n} training images, fewer than --batch {a.batch}")
    idle_kib = rss_kib()  # the process before the model exists (imports, data loaded)
    model = Cnn(tuple(images.shape[1:]), classes, a.conv_channels, a.kernel, a.padding, a.pool, a.hidden, a.dropout)
    he_normal_(model)  # the same on every process (seeded); DDP also broadcasts rank 0's
    model.train()
    run = nn.parallel.DistributedDataParallel(model) if a.ddp else model
    autocast = torch.bfloat16 if a.precision == "bf16" else None
    if rank == 0:
        print(f"config model=cnn precision={a.precision} torch={torch.__version__} threads={torch.get_num_threads()} "
              f"input={'x'.join(map(str, images.shape[1:]))} classes={classes} "
              f"params={sum(p.numel() for p in model.parameters())} processes={world}", flush=True)
    decay = [p for name, p in model.named_parameters() if name.endswith(".weight")]
    other = [p for name, p in model.named_parameters() if not name.endswith(".weight")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    gen = torch.Generator().manual_seed(a.seed)  # the order of the images: the same on every process
    order, cursor = torch.randperm(n, generator=gen), 0
    share = a.batch // world
    for step in range(1, a.steps + 1):
        start = time.perf_counter()
        if cursor + a.batch > n:  # a new epoch (the last partial batch is dropped)
            order, cursor = torch.randperm(n, generator=gen), 0
        idx = order[cursor:cursor + a.batch][rank * share:(rank + 1) * share]
        cursor += a.batch
        x = images[idx].float().div_(255.0)
        y = labels[idx]
        with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
            loss = run(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        value = float(loss)
        ms = (time.perf_counter() - start) * 1e3
        end = time.time()  # wall clock at the step's end: lines it up with outside probes
        if rank == 0:  # with --ddp: rank 0's loss (its share of the images) and time
            print(f"step {step} loss {value:.6f} ms {ms:.3f} end {end:.6f}", flush=True)
    # One line per process (--ddp: one per rank; a benchmark sums them).
    print(f"idle_rss_kib {idle_kib}", flush=True)
    print(f"peak_rss_kib {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", flush=True)
    if a.ddp:
        import torch.distributed as dist
        dist.destroy_process_group()


def main(argv):
    if len(argv) >= 2 and argv[1] == "train":
        return train(argv[2:])
    raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
