"""The digits MLP of `examples.train_digits_torch`, made elastic with `agent.trainer.elastic`.

The PyTorch twin of `examples.train_digits_elastic`: the same fixed global batch, summed and
scaled loss, and agreed stops, so the result matches a one-process run of the same seed.
`ElasticTrainer` sees that the script imported torch and uses torch.distributed (gloo on CPU).
Run alone::

    python -m examples.train_digits_torch_elastic --epochs 5

or elastic, one agent per member::

    edl-agent run --elastic --job digits --membership local:/tmp/edl --min 1 --max 4 \\
        -- python -m examples.train_digits_torch_elastic --epochs 5
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from agent.trainer.elastic import ElasticTrainer
from agent.trainer.sampler import ElasticSampler
from agent.trainer.step_gate import StepGate
from examples.digits_data import elastic_args, load_data
from examples.train_digits_torch import build_model


def main(argv: Sequence[str] | None = None) -> int:
    args = elastic_args(sys.argv[1:] if argv is None else argv, __doc__.splitlines()[0])
    logging.basicConfig(level=logging.INFO, format="trainer: %(message)s")  # ElasticTrainer's lines
    torch.set_num_threads(1)  # one trainer per pod shares the node's cores with its peers
    with ElasticTrainer.start() as et:
        torch.manual_seed(args.seed)  # every incarnation builds the same model
        x_train, y_train, x_test, y_test = load_data(args.seed)
        model = build_model(args.hidden)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
        sampler = ElasticSampler(len(x_train), args.global_batch, args.epochs, args.seed)
        started = time.perf_counter()
        et.register(model, optimizer, sampler)
        gate = None if args.step_gate is None else StepGate(args.step_gate)
        for plan in et.steps(gate):
            idx = plan.indices
            weight = 1.0
            if len(idx) == 0:  # this rank got nothing in an epoch's last step: join with zeros
                idx, weight = np.array([0]), 0.0
            logits = model(torch.from_numpy(x_train[idx]))
            loss = F.cross_entropy(logits, torch.from_numpy(y_train[idx]), reduction="sum")
            (loss * (weight * et.loss_scale(plan))).backward()
            et.all_reduce_gradients()
            optimizer.step()
            optimizer.zero_grad()
            if weight:  # the mean loss of this rank's share: edl_trainer_scalar{name="loss"}
                et.recorder.scalar("loss", loss.item() / len(idx))
            if args.step_sleep or args.sample_sleep:
                time.sleep(args.step_sleep + args.sample_sleep * len(plan.indices))
        trained = time.perf_counter() - started
        model.eval()
        with torch.no_grad():
            predicted = model(torch.from_numpy(x_test)).argmax(dim=1).numpy()
        accuracy = float((predicted == y_test).mean())
        figures = {
            "accuracy": accuracy,
            "global_step": et.global_step,
            "generation": et.generation,
            "world_size": et.world_size,
            "train_seconds": trained,
        }
        print(f"rank {et.rank}/{et.world_size}: {json.dumps(figures)}", flush=True)
        if args.result is not None and et.rank == 0:
            args.result.write_text(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
