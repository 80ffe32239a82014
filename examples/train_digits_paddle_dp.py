"""The digits MLP, data-parallel in Paddle: a DataLoader, paddle.DataParallel, epochs.

`examples.train_digits_paddle_dp` is the plain script, as an ML engineer has it before EDL::

    python -m paddle.distributed.launch --nproc_per_node 2 \\
        examples/train_digits_paddle_dp.py --batch-size 32 --workers 2

`examples.train_digits_paddle_dp_elastic` is the same script made elastic, six lines changed
(its `--global-batch` is fixed whatever the world; `diff` the two files, or see
docs/agent.md)::

    edl-agent run --elastic --job digits --membership local:/tmp/edl --min 1 --max 4 \\
        -- python -m examples.train_digits_paddle_dp_elastic --global-batch 64 --workers 2
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import paddle
import paddle.distributed as dist
import paddle.nn.functional as F
from paddle.io import DataLoader, DistributedBatchSampler

from examples.digits_data import ddp_args
from examples.digits_paddle import digits_datasets, report
from examples.train_digits import build_model


def main(argv: Sequence[str] | None = None) -> int:
    args = ddp_args(sys.argv[1:] if argv is None else argv, __doc__.splitlines()[0])
    dist.init_parallel_env()
    paddle.seed(args.seed)  # every rank builds the same model
    train, test = digits_datasets(args.seed)
    model = build_model(args.hidden)
    optimizer = paddle.optimizer.Adam(args.learning_rate, parameters=model.parameters())
    model = paddle.DataParallel(model)
    sampler = DistributedBatchSampler(train, args.batch_size, shuffle=True)
    loader = DataLoader(train, batch_sampler=sampler, num_workers=args.workers)
    started = time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
            time.sleep(args.step_sleep)
    report(model, test, dist.get_rank(), args.result, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
