"""Training on several processes: ``torchrun --nproc_per_node N -m interp train ...``.

torchrun starts N copies of the command with ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` (and the
rendezvous address) in their environment. Each copy joins one process group (gloo on CPU, nccl on
CUDA, where rank r trains on ``cuda:LOCAL_RANK``), samples the same full batch from the (seed, step)
generator and keeps its own contiguous slice of the rows; DistributedDataParallel averages the
gradients, so every process takes the same optimizer step as a single process would on the whole
batch. Only rank 0 writes files. Without torchrun in the environment nothing here does anything:
no process group, no DDP wrapper.
"""
from __future__ import annotations

import functools
import os
from contextlib import contextmanager

import torch
import torch.distributed as dist

from .errors import UserError


def launched_by_torchrun() -> bool:
    return all(name in os.environ for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"))


class Group:
    """This process's place among the training processes (one process, rank 0, without torchrun)."""

    def __init__(self, world_size: int = 1, rank: int = 0, local_rank: int = 0, device: str = "cpu",
                 active: bool = False, owned: bool = False):
        self.world_size, self.rank, self.local_rank = world_size, rank, local_rank
        self.device, self.active, self.owned = device, active, owned

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model, loss):
        """``batch -> loss(model, batch)``; under torchrun through DDP, so backward averages gradients."""
        if not self.active:
            return functools.partial(loss, model)
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [self.local_rank] if self.device.startswith("cuda") else None
        return DistributedDataParallel(_Loss(model, loss), device_ids=device_ids)

    def shard(self, batch):
        """This process's contiguous share of a batch: rows rank*B/W to (rank+1)*B/W."""
        if self.world_size == 1:
            return batch
        size = len(batch) // self.world_size
        rows = slice(self.rank * size, (self.rank + 1) * size)

        def cut(value):
            return value[rows] if isinstance(value, torch.Tensor) and value.dim() and len(value) == len(batch) else value

        return batch.map(cut)

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """The mean of a scalar over the processes (gloo has no AVG, so a sum divided by W)."""
        if not self.active:
            return value
        total = value.detach().float().clone()
        dist.all_reduce(total)
        return total / self.world_size

    @contextmanager
    def together(self):
        """Run a block on every process; when it raises on any of them, it raises on all.

        So a mistake seen by one process (a file it cannot read, say) never leaves the others
        waiting forever in the next collective.
        """
        if not self.active:
            yield
            return
        try:
            yield
        except BaseException:
            self._count_failures(1)
            raise
        failed = self._count_failures(0)
        if failed:
            raise UserError(f"{failed} of the {self.world_size} training processes stopped with an error "
                            f"(printed above); stopping this one too")

    def _count_failures(self, mine: int) -> int:
        flag = torch.tensor([mine], dtype=torch.int32, device=self.device)
        dist.all_reduce(flag)
        return int(flag.item())

    def close(self) -> None:
        """Leave the process group (only if this trainer created it)."""
        if self.owned and dist.is_initialized():
            dist.destroy_process_group()
        self.active = self.owned = False


class _Loss(torch.nn.Module):
    """The loss as a module's forward: DDP syncs gradients only for backwards of its own forward."""

    def __init__(self, model, loss):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, batch):
        return self.loss(self.model, batch)


def start(device: str) -> tuple[Group, str]:
    """Join the process group when torchrun started this process; the group and the device to train on."""
    if not launched_by_torchrun():
        return Group(device=device), device
    try:
        world_size, rank, local_rank = (int(os.environ[k]) for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"))
    except ValueError:
        raise UserError("WORLD_SIZE, RANK and LOCAL_RANK must be integers (they are set by torchrun)") from None
    cuda = torch.device(device).type == "cuda"
    if cuda:
        if local_rank >= torch.cuda.device_count():
            raise UserError(f"process {rank} has LOCAL_RANK {local_rank}, but this node has only "
                            f"{torch.cuda.device_count()} CUDA devices; start fewer processes per node")
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(local_rank)
    owned = not dist.is_initialized()
    if owned:  # the rendezvous (MASTER_ADDR, MASTER_PORT) comes from torchrun's environment
        dist.init_process_group("nccl" if cuda else "gloo")
    world_size, rank = dist.get_world_size(), dist.get_rank()
    return Group(world_size, rank, local_rank, device, active=True, owned=owned), device
