"""A small real PyTorch model trained with DDP under AntDT.

An MLP classifies points of a synthetic dataset the example generates itself
(no downloads): every rank builds the same records from the same seed, and the
sharding service decides which rank trains on which record. Run it through
AntDT (`antdt run examples/pytorch/job.yaml`, or the operator with
examples/k8s/pytorch.yaml): everything comes from the environment those set.

ANTDT_MODE=plain trains the same model over the same records as plain DDP with
torch's DistributedSampler (equal static shards, no AntDT data service): the
baseline that `antdt bench stragglers --policies plain,...` compares with.

At the end rank 0 evaluates the model on a held-out set it generates and
writes the log-loss and accuracy to $ANTDT_LOSS_LOG.eval.json.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

FEATURES = 32
CLASSES = 4
# Wide enough that a step's compute (about 9 ms for 32 samples on one core
# here) outweighs its fixed costs, as in real training.
HIDDEN = 512


class Synthetic(Dataset):
    """``n`` points in R^FEATURES labelled by a fixed random teacher network,
    with 5 % label noise: deterministic given ``seed``."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        teacher = torch.Generator().manual_seed(1234)  # the same task for every split
        w1 = torch.randn(FEATURES, 64, generator=teacher)
        w2 = torch.randn(64, CLASSES, generator=teacher)
        self.x = torch.randn(n, FEATURES, generator=g)
        self.y = (torch.tanh(self.x @ w1) @ w2).argmax(dim=1)
        noisy = torch.rand(n, generator=g) < 0.05
        self.y[noisy] = torch.randint(0, CLASSES, (int(noisy.sum()),), generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)  # every rank starts from the same weights
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, CLASSES))


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value else default


def evaluate(model: torch.nn.Module, out_path: str) -> None:
    held_out = Synthetic(4096, seed=99)
    with torch.no_grad():
        logits = model(held_out.x)
        loss = F.cross_entropy(logits, held_out.y).item()
        accuracy = (logits.argmax(dim=1) == held_out.y).float().mean().item()
    with open(out_path, "w") as f:
        json.dump({"log_loss": loss, "accuracy": accuracy, "records": len(held_out)}, f)
    logging.info("held-out log-loss %.4f, accuracy %.4f", loss, accuracy)


def train_antdt(data: Synthetic, lr: float) -> Optional[torch.nn.Module]:
    from antdt.torch import Session

    session = Session.from_env(sample_fn=data.__getitem__,
                               num_workers=env_int("ANTDT_DATALOADER_WORKERS", 0))
    net = make_model()
    model = session.wrap(net, broadcast_buffers=False)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)

    def train_step(step) -> float:
        total = 0.0
        for i, (x, y) in enumerate(step.micro_batches):
            with step.sync(i):
                loss = F.cross_entropy(model(x), y, reduction="sum")
                (loss * step.loss_scale).backward()
            total += loss.item()
        return total

    summary = session.run(train_step, optimizer)
    logging.info("rank %d: %s", session.group.rank, summary)
    # Restarted after the dataset was finished: this process trained nothing,
    # so its model is not the job's (the incarnation that trained evaluated it).
    return net if summary.steps > 0 else None


def train_plain(data: Synthetic, lr: float) -> torch.nn.Module:
    rank, world = env_int("RANK", 0), env_int("WORLD_SIZE", 1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    net = make_model()
    model = DistributedDataParallel(net, broadcast_buffers=False)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    batch = env_int("ANTDT_GLOBAL_BATCH", 64) // world
    loader = DataLoader(data, batch_size=batch, sampler=sampler)
    log_path = os.environ.get("ANTDT_LOSS_LOG", "")
    step = 0
    for epoch in range(env_int("ANTDT_EPOCHS", 1)):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            if rank == 0 and log_path:
                with open(log_path, "a") as f:
                    f.write(json.dumps({"time_unix": round(time.time(), 3), "step": step,
                                        "loss": mean.item() / world,
                                        "samples": batch * world}) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return net


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    torch.set_num_threads(1)
    data = Synthetic(env_int("ANTDT_RECORDS", 8192), seed=env_int("ANTDT_SEED", 0) + 7)
    lr = float(os.environ.get("ANTDT_LEARNING_RATE") or 0.1)
    if os.environ.get("ANTDT_MODE", "antdt") == "plain":
        net = train_plain(data, lr)
    else:
        net = train_antdt(data, lr)
    log_path = os.environ.get("ANTDT_LOSS_LOG", "")
    if env_int("RANK", 0) == 0 and log_path and net is not None:
        evaluate(net, log_path + ".eval.json")
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without running the C++ destructors of torch's process groups:
    # one that broke during a regroup can abort the interpreter's teardown
    # ("terminate called without an active exception") after the job's work
    # is done and committed, and a non-zero exit would restart this rank.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
