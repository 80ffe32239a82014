"""The digits MLP of `examples.train_digits`, made elastic with `agent.trainer.elastic`.

It survives any number of world changes without losing or repeating a sample: the global
batch is fixed (`--global-batch`) and split over whoever trains this step, the loss is
summed and scaled so the averaged gradient is the mean over the global batch, and a rescale
stops every rank at the same step boundary with the state handed over. So the result matches
a one-process run of the same seed. Run alone::

    python -m examples.train_digits_elastic --epochs 5

or elastic, one agent per member (they find each other through the membership store)::

    edl-agent run --elastic --job digits --membership local:/tmp/edl --min 1 --max 4 \\
        -- python -m examples.train_digits_elastic --epochs 5
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

import numpy as np
import paddle
import paddle.nn.functional as F

from agent.trainer.elastic import ElasticTrainer
from agent.trainer.sampler import ElasticSampler
from agent.trainer.step_gate import StepGate
from examples.digits_data import elastic_args, load_data
from examples.train_digits import build_model


def main(argv: Sequence[str] | None = None) -> int:
    args = elastic_args(sys.argv[1:] if argv is None else argv, __doc__.splitlines()[0])
    with ElasticTrainer.start() as et:
        paddle.seed(args.seed)  # every incarnation builds the same model (names included)
        x_train, y_train, x_test, y_test = load_data(args.seed)
        model = build_model(args.hidden)
        optimizer = paddle.optimizer.Adam(
            learning_rate=args.learning_rate, parameters=model.parameters()
        )
        sampler = ElasticSampler(len(x_train), args.global_batch, args.epochs, args.seed)
        et.register(model, optimizer, sampler)
        gate = None if args.step_gate is None else StepGate(args.step_gate)
        for plan in et.steps(gate):
            idx = plan.indices
            weight = 1.0
            if len(idx) == 0:  # this rank got nothing in an epoch's last step: join with zeros
                idx, weight = np.array([0]), 0.0
            logits = model(paddle.to_tensor(x_train[idx]))
            loss = F.cross_entropy(logits, paddle.to_tensor(y_train[idx]), reduction="sum")
            (loss * (weight * et.loss_scale(plan))).backward()
            et.all_reduce_gradients()
            optimizer.step()
            optimizer.clear_grad()
            if weight:  # the mean loss of this rank's share: edl_trainer_scalar{name="loss"}
                et.recorder.scalar("loss", float(loss) / len(idx))
            if args.step_sleep or args.sample_sleep:
                time.sleep(args.step_sleep + args.sample_sleep * len(plan.indices))
            if args.log_every and et.rank == 0 and weight and et.global_step % args.log_every == 0:
                # the mean over this rank's share of the global batch: an estimate of the loss
                print(f"step {et.global_step} loss {float(loss) / len(idx):.4f}", flush=True)
        model.eval()
        with paddle.no_grad():
            predicted = model(paddle.to_tensor(x_test)).argmax(axis=1).numpy()
        accuracy = float((predicted == y_test).mean())
        figures = {
            "accuracy": accuracy,
            "global_step": et.global_step,
            "generation": et.generation,
            "world_size": et.world_size,
            "train_samples": len(x_train),
            "epochs": args.epochs,
        }
        print(f"rank {et.rank}/{et.world_size}: {json.dumps(figures)}", flush=True)
        if args.result is not None and et.rank == 0:
            args.result.write_text(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
