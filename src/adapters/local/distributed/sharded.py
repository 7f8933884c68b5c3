"""The trainer inside one rank: the same PolicyTrainer, its model sharded with FSDP2.

Every rank builds the model from the base weights, wraps each decoder layer and then the
whole model with `fully_shard`, and keeps only its shard of every parameter, gradient and
AdamW moment. What differs from one process is three things, all chosen so that a step's
gradient and metrics are the single-process ones up to float rounding:

- Rows: each optimizer step's rows are cut into `size` contiguous, near-equal blocks, block
  r to rank r, deterministic in the batch alone. With the KL penalty on, the blocks are of
  the single-process micro-batches instead of rows, because the penalty's mean is taken per
  micro-batch and regrouping rows would change it. Every rank runs as many micro-batch passes
  as the busiest one (a pass over a row with nothing to learn from fills the gap), because
  every forward and backward takes part in the same all-gathers and reduce-scatters.
- Gradients: the loss of every micro-batch is already divided by the optimizer step's total
  completion tokens (over all ranks), so the step's gradient is the SUM of the ranks'
  gradients. FSDP2 averages by default; here it is told to sum (divide factor 1, plain SUM
  collectives, which NCCL and gloo both have).
- Metrics: loss, token, entropy, clipping and KL sums are all-reduced, and the importance
  ratios all-gathered, before the single-process formulas turn them into the step's numbers.
  The gradient norm comes from clipping over the sharded gradients (a global norm).

State crosses the process boundary only through rank 0, which alone reads and writes the run's
checkpoint folder (it runs beside the frontend): loading broadcasts rank 0's full tensors to
every rank's shard, saving gathers full tensors (trainable ones only) to rank 0's CPU, which
writes them in exactly the single-process format (see `state.py`). So a checkpoint does not
know how many ranks wrote it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..layers import decoder_layers, use_checkpointing
from ..loss import LossStats
from ..step_plan import WholeBatch, micro_batches
from ..trainer import PolicyTrainer, TrainerSettings
from . import state as sharded_state


class RankShare(WholeBatch):
    """Rank `rank` of `size`: its block of each step's rows, and the sums over all ranks."""

    def __init__(self, rank: int, size: int, device: torch.device) -> None:
        self.rank = rank
        self.size = size
        self.device = device

    def plan(
        self, chunk_rows: list[int], micro_rows: int, *, whole_micro_batches: bool = False
    ) -> list[list[int]]:
        if whole_micro_batches:
            units = micro_batches(chunk_rows, micro_rows)
            mine = units[self._block(len(units), self.rank)]
            passes = max(len(units[self._block(len(units), r)]) for r in range(self.size))
        else:
            mine = micro_batches(chunk_rows[self._block(len(chunk_rows), self.rank)], micro_rows)
            passes = max(
                math.ceil(len(range(len(chunk_rows))[self._block(len(chunk_rows), r)]) / micro_rows)
                for r in range(self.size)
            )
        return mine + [[] for _ in range(passes - len(mine))]

    def _block(self, count: int, rank: int) -> slice:
        """Rank `rank`'s contiguous share of `count` items (sizes differ by at most one)."""
        return slice(count * rank // self.size, count * (rank + 1) // self.size)

    def reduce(self, stats: LossStats) -> LossStats:
        sums = torch.tensor(
            [stats.loss, stats.tokens, stats.entropy_sum, stats.clipped, stats.kl_sum],
            dtype=torch.float64,
            device=self.device,
        )
        dist.all_reduce(sums)
        loss, tokens, entropy, clipped, kl = sums.tolist()
        return LossStats(
            loss=loss,
            tokens=round(tokens),
            entropy_sum=entropy,
            ratios=self._gather_ratios(stats.ratios),
            clipped=round(clipped),
            kl_sum=kl,
        )

    def _gather_ratios(self, ratios: torch.Tensor) -> torch.Tensor:
        """Every rank's ratios in rank order (blocks are contiguous: the batch's row order)."""
        local = ratios.to(self.device, torch.float32)
        count = torch.tensor([local.numel()], device=self.device)
        counts = [torch.zeros_like(count) for _ in range(self.size)]
        dist.all_gather(counts, count)
        longest = max(int(c.item()) for c in counts)
        padded = torch.zeros(longest, dtype=torch.float32, device=self.device)
        padded[: local.numel()] = local
        gathered = [torch.zeros_like(padded) for _ in range(self.size)]
        dist.all_gather(gathered, padded)
        parts = [g[: int(c.item())] for g, c in zip(gathered, counts)]
        return torch.cat(parts).cpu()

    def clip_grad_norm(self, params: list[torch.nn.Parameter], limit: float) -> float:
        norm: Any = torch.nn.utils.clip_grad_norm_(params, limit)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        return float(norm.item())


class ShardedTrainer(PolicyTrainer):
    """A PolicyTrainer whose model is sharded across the ranks of the default process group."""

    def __init__(self, settings: TrainerSettings, rank: int, size: int) -> None:
        super().__init__(settings)
        self.rank = rank
        self.size = size
        self.split = RankShare(rank, size, torch.device(settings.device))

    # --- building -----------------------------------------------------------------------

    def load(self, checkpoint: Path | None) -> None:
        """Build, shard, and fill from rank 0's reading of `checkpoint` (None: the base)."""
        found = sharded_state.read_on_rank0(checkpoint) if self.rank == 0 else None
        shared: list[Any] = [found.header if found is not None else None]
        dist.broadcast_object_list(shared, src=0)
        header: sharded_state.CheckpointHeader | None = shared[0]
        if checkpoint is not None and header is None:
            raise AssertionError("rank 0 read no checkpoint header")
        foreign = header is not None and header.foreign
        state = header.state if header is not None and not foreign else None
        self._note_source(checkpoint, state, foreign=foreign)
        base = self._base_model()
        full = self._choose_mode(state, base, checkpoint, foreign=foreign)
        self.full_finetune = full
        if full and base.dtype != torch.float32:
            base = base.float()
        if full:
            self.model = base
        else:
            self.model = self._lora_from(base, header.lora_config if header else None)
        self.model.eval()
        self.recompute = use_checkpointing(self.model, self.settings, full=full)
        self._shard()
        self._build_optimizer()
        if header is not None:
            sharded_state.scatter_weights(self, found)
            if header.has_optimizer:
                sharded_state.scatter_optimizer(self, found)

    def _lora_from(self, base: Any, config: Any | None) -> Any:
        """A fresh adapter (seeded like one process), or one shaped by the checkpoint's
        adapter config, whose weights rank 0 then broadcasts."""
        if config is None:
            return self._lora(base, None)
        from peft import get_peft_model

        return get_peft_model(base, config)

    def _shard(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, fully_shard

        device = torch.device(self.settings.device)
        mesh = init_device_mesh(device.type, (self.size,))
        for layer in decoder_layers(self.model, full=self.full_finetune):
            fully_shard(layer, mesh=mesh)
        fully_shard(self.model, mesh=mesh)
        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)

    def _reshard(self) -> None:
        """Back to sharded parameters: a forward without backward leaves the root module's
        parameters gathered (FSDP2 keeps them for the backward that never comes)."""
        from torch.distributed.fsdp import FSDPModule

        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()

    # --- saving -------------------------------------------------------------------------

    def write_checkpoint(self, directory: Path) -> None:
        """Every rank gathers; rank 0 writes the single-process files into `directory`."""
        sharded_state.write_gathered(self, directory)

    # --- KL reference -------------------------------------------------------------------

    def _load_reference(self, reference: Path | None) -> None:
        sharded_state.scatter_reference(self, reference)

    def _restore(self, saved: dict[str, torch.Tensor]) -> None:
        self._reshard()
        super()._restore(saved)


__all__ = ["RankShare", "ShardedTrainer"]
