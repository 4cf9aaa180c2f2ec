"""One rank of the weighting test (run by test_torch_session.py): trains a
float64 linear model with plain SGD under antdt.torch.Session and writes, per
optimizer step, the record ids it trained on; rank 0 writes the final
parameters. TEST_PROPOSE="STEP:BATCH:ACCUMULATION" makes the rank propose a
batch change (as a directive would) once it reaches STEP."""

from __future__ import annotations

import json
import logging
import os
import sys

import torch

from antdt.torch import Session

FEATURES = 8


def sample(record_id: int):
    g = torch.Generator().manual_seed(record_id)
    x = torch.randn(FEATURES, generator=g, dtype=torch.float64)
    y = (x.sum() > 0).to(torch.float64)
    return record_id, x, y


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)
    workdir = os.environ["TEST_WORKDIR"]
    rank = int(os.environ["RANK"])
    session = Session.from_env(sample_fn=sample,
                               num_workers=int(os.environ.get("TEST_LOADER_WORKERS", "0")),
                               checkpoint_every=int(os.environ.get("TEST_CHECKPOINT_EVERY", "0")))
    torch.manual_seed(0)
    net = torch.nn.Linear(FEATURES, 1).to(torch.float64)
    model = session.wrap(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
    trace = open(os.path.join(workdir, f"trace-{rank}.jsonl"), "a")
    propose = os.environ.get("TEST_PROPOSE", "")
    incarnation = int(os.environ.get("ANTDT_INCARNATION", "0"))

    def train_step(step) -> float:
        if propose:
            at, bs, acc = (int(v) for v in propose.split(":"))
            if step.number == at:
                session.propose(bs, acc)
        total = 0.0
        ids = []
        for i, (rid, x, y) in enumerate(step.micro_batches):
            with step.sync(i):
                out = model(x).squeeze(1)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    out, y, reduction="sum")
                (loss * step.loss_scale).backward()
            total += loss.item()
            if step.samples:
                ids.extend(int(r) for r in rid)
        trace.write(json.dumps({"step": step.number, "ids": ids, "incarnation": incarnation,
                                "micro": len(step.micro_batches) if step.samples else 0}) + "\n")
        trace.flush()
        return total

    summary = session.run(train_step, optimizer)
    trace.close()
    if rank == 0:
        torch.save({k: v for k, v in net.state_dict().items()},
                   os.path.join(workdir, "final.pt"))
    print(json.dumps({"rank": rank, "summary": summary.__dict__}), flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    # As examples/pytorch/train.py: leave without the C++ destructors of
    # torch's process groups and store, which now and then abort the
    # interpreter's teardown ("terminate called without an active exception",
    # exit -6) after the rank's work is done and its summary printed (seen in
    # 1 run of 2 on a loaded machine).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
