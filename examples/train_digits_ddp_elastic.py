"""The digits MLP, data-parallel in PyTorch: a DataLoader, DistributedDataParallel, epochs.

`examples.train_digits_ddp` is the plain script, as an ML engineer has it before EDL::

    torchrun --nproc-per-node 2 -m examples.train_digits_ddp --batch-size 32 --workers 2

`examples.train_digits_ddp_elastic` is the same script made elastic, six lines changed (its
`--global-batch` is fixed whatever the world; `diff` the two files, or see docs/agent.md)::

    edl-agent run --elastic --job digits --membership local:/tmp/edl --min 1 --max 4 \\
        -- python -m examples.train_digits_ddp_elastic --global-batch 64 --workers 2
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

from agent.trainer import ElasticDataLoader, ElasticDataParallel, ElasticTrainer
from examples.digits_data import ddp_args
from examples.digits_torch import device_of, digits_datasets, report
from examples.train_digits_torch import build_model


def main(argv: Sequence[str] | None = None) -> int:
    args = ddp_args(sys.argv[1:] if argv is None else argv, __doc__.splitlines()[0])
    torch.set_num_threads(1)  # one rank per core
    et = ElasticTrainer.start()
    torch.manual_seed(args.seed)  # every rank builds the same model
    train, test = digits_datasets(args.seed)
    device = device_of(args.device)
    model = build_model(args.hidden).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    model = ElasticDataParallel(model, optimizer, et)
    loader = ElasticDataLoader(train, args.global_batch, et, num_workers=args.workers)
    sampler = loader.sampler
    started = time.perf_counter()
    for epoch in et.epochs(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            time.sleep(args.step_sleep)
    report(model, test, dist.get_rank(), args.result, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
