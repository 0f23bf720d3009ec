#!/usr/bin/env python3
"""A small, real, deterministic DDP trainer for impact (example/README.md,
"PyTorch on impact").

It runs as one process per allocation (impact-exec sets RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) or under torchrun (which sets them per worker),
over gloo on CPU or NCCL on GPU. It:

  - resumes from the latest checkpoint in --checkpoint-dir when there is one
    (the directory must be shared by every allocation and survive the
    allocation: a requeued job gets new allocations, so never put it under
    NOMAD_ALLOC_DIR);
  - checkpoints every --checkpoint-every steps, and when it gets one of the
    --signals (default SIGUSR1 and SIGTERM): it finishes the step in flight,
    rank 0 saves, every rank writes IMPACT_REQUEUE_FILE (if set) and exits
    75 (impact_requeue_exit_code), so the job is requeued and resumes here;
  - on a peer's failure (a collective that raises), saves if it is rank 0
    and its state is whole, and exits 75 the same way;
  - writes checkpoints atomically (a temporary file, fsync, rename, fsync of
    the directory), so a kill at any moment leaves the previous one intact;
  - is deterministic: the data of step s on rank r depends only on (seed, s,
    r), so an interrupted and resumed run ends with the same weights, bit
    for bit, as an uninterrupted one of the same world size;
  - exits 0 when --steps are done, after rank 0 wrote final.pt and printed
    the weights' sha256.

Progress goes to stdout and, one JSON object a line, to
<checkpoint-dir>/events.jsonl (rank 0's steps and every rank's start and end),
which the end-to-end suite reads.
"""

import argparse
import hashlib
import json
import os
import signal
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

REQUEUE_EXIT_CODE = int(os.environ.get("NOMAD_META_impact_requeue_exit_code", "75"))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint-dir", required=True, help="shared, durable directory for checkpoints")
    p.add_argument("--steps", type=int, default=600, help="steps in all")
    p.add_argument("--checkpoint-every", type=int, default=50, help="save every N steps")
    p.add_argument("--step-time", type=float, default=0.0, help="seconds each step at least takes (to stretch a tiny model)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    p.add_argument("--signals", default="SIGUSR1,SIGTERM", help="signals that mean: checkpoint and exit for requeue")
    p.add_argument("--backend", default="", help="gloo or nccl (default: nccl with CUDA, else gloo)")
    p.add_argument("--no-resume", action="store_true", help="start from step 0 even if a checkpoint exists")
    return p.parse_args()


class Run:
    def __init__(self, args):
        self.args = args
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.ckpt_dir = args.checkpoint_dir
        self.ckpt = os.path.join(self.ckpt_dir, "checkpoint.pt")
        self.stop_signal = None

    def event(self, kind, **kw):
        rec = {"event": kind, "rank": self.rank, "world": self.world, "t": time.time(),
               "host": socket.gethostname(), "pid": os.getpid(),
               "alloc": os.environ.get("NOMAD_ALLOC_ID", "")}
        rec.update(kw)
        line = json.dumps(rec, sort_keys=True)
        print(line, flush=True)
        # O_APPEND: whole lines from every rank, never interleaved.
        fd = os.open(os.path.join(self.ckpt_dir, "events.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def on_signal(self, signum, frame):
        if self.stop_signal is None:
            self.stop_signal = signal.Signals(signum).name


def atomic_save(obj, path):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def weights_digest(model):
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def batch(seed, step, rank, n, device):
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + rank)
    x = torch.randn(n, 16, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    return x.to(device), y.to(device)


def requeue_exit(run, why):
    f = os.environ.get("IMPACT_REQUEUE_FILE")
    if f:
        # Tells impact-exec that the checkpoint is saved, when a launcher
        # (torchrun) turns this process's exit code into its own.
        with open(f, "w") as fh:
            fh.write(why + "\n")
    run.event("exit", code=REQUEUE_EXIT_CODE, why=why)
    sys.stdout.flush()
    os._exit(REQUEUE_EXIT_CODE)


def main():
    args = parse_args()
    run = Run(args)
    os.makedirs(run.ckpt_dir, exist_ok=True)
    for name in args.signals.split(","):
        if name.strip():
            signal.signal(getattr(signal, name.strip()), run.on_signal)

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    cuda = torch.cuda.is_available()
    backend = args.backend or ("nccl" if cuda else "gloo")
    device = torch.device("cuda", run.local_rank) if cuda and backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # env:// reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE.
    dist.init_process_group(backend=backend, init_method="env://")

    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    step = 0
    resumed = False
    if not args.no_resume and os.path.exists(run.ckpt):
        state = torch.load(run.ckpt, map_location=device)
        if state["world"] != run.world:
            raise SystemExit("checkpoint was written by a world of %d, this one is %d" % (state["world"], run.world))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        step = state["step"]
        resumed = True
    ddp = DDP(model)
    run.event("start", step=step, resumed=resumed, backend=backend,
              master="%s:%s" % (os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")))

    def save(why):
        if run.rank == 0:
            atomic_save({"step": step, "world": run.world, "model": model.state_dict(), "optim": opt.state_dict()}, run.ckpt)
            run.event("checkpoint", step=step, why=why)

    loss_fn = nn.MSELoss()
    flag = torch.zeros(1, device=device)
    while step < args.steps:
        t0 = time.monotonic()
        try:
            x, y = batch(args.seed, step, run.rank, args.batch, device)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x), y)
            loss.backward()  # DDP averages the gradients over the ranks here
            opt.step()
            step += 1
            if args.step_time > 0:
                time.sleep(max(0.0, args.step_time - (time.monotonic() - t0)))
            # Every rank stops at the same step, whenever its signal came.
            flag.fill_(1.0 if run.stop_signal else 0.0)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        except RuntimeError as e:
            # A peer is gone (killed, its node lost). The optimizer step is
            # taken only after the gradients were averaged, so `step` counts
            # whole steps and the state is theirs.
            run.event("peer_failed", step=step, error=str(e).splitlines()[0][:200])
            save("peer failed")
            requeue_exit(run, "peer failed, checkpoint at step %d" % step)
        if run.rank == 0:
            run.event("step", step=step, loss=round(loss.item(), 6))
        if flag.item() > 0:
            run.event("signal", step=step, signal=run.stop_signal or "peer")
            save("signal")
            dist.barrier()  # the checkpoint is on disk before anyone leaves
            requeue_exit(run, "checkpoint signal, checkpoint at step %d" % step)
        if step % args.checkpoint_every == 0 and step < args.steps:
            save("every %d steps" % args.checkpoint_every)

    dist.barrier()
    if run.rank == 0:
        digest = weights_digest(model)
        atomic_save({"step": step, "world": run.world, "model": model.state_dict(), "optim": opt.state_dict()}, run.ckpt)
        atomic_save(model.state_dict(), os.path.join(run.ckpt_dir, "final.pt"))
        run.event("done", step=step, sha256=digest)
    else:
        run.event("done", step=step)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
