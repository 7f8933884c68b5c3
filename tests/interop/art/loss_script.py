"""Run `loss` (ART's, or arthex's under `arthex.art`: the first argument names the package) on
seeded tensors and print, as JSON, what its functions gave: the ratio histogram's edges, the
histogram quantiles of random counts, and for each experimental_config the loss, its gradient,
the entropy, probs_corr, the KL term, each call's off-policy diagnostics and the metrics their
accumulator gives over all the calls.

Runs in the venv that has ART and torch (arthex on PYTHONPATH for its own run).
"""

import importlib
import json
import math
import sys

import torch

CONFIGS = [
    {},
    {"epsilon": 0.2, "epsilon_high": 0.2},
    {"ppo": True},
    {"ppo": True, "epsilon_high": 0.3},
    {"kl_penalty_coef": 0.1},
    {"ppo": True, "kl_penalty_coef": 0.5},
]


def values(tensor):
    return None if tensor is None else tensor.detach().double().reshape(-1).tolist()


def packed(generator, rows, length):
    """ART's packed tensors, unshifted: prompts, then assistant tokens, then padding."""
    mask = torch.zeros((rows, length), dtype=torch.bool)
    for row in range(rows):
        start = int(torch.randint(1, length // 2, (1,), generator=generator))
        end = int(torch.randint(start + 1, length + 1, (1,), generator=generator))
        mask[row, start:end] = True
    old = -torch.rand((rows, length), generator=generator, dtype=torch.float64) * 3
    old[torch.rand((rows, length), generator=generator) < 0.1] = math.nan  # unknown
    advantages = torch.randn((rows, 1), generator=generator, dtype=torch.float64)
    weights = torch.rand((rows, 1), generator=generator, dtype=torch.float64) + 0.5
    weights = weights.expand(rows, length).clone()
    weights[0, -3:] = 0.0  # some trained positions weigh nothing
    return {
        "assistant_mask": mask,
        "logprobs": old,
        "advantages": torch.where(mask, advantages, 0.0),
        "weights": torch.where(mask, weights, 0.0),
        "group_ids": torch.arange(rows).unsqueeze(1).expand(rows, length) + 1,
    }


def main():
    loss = importlib.import_module(f"{sys.argv[1]}.loss")
    generator = torch.Generator().manual_seed(523)
    out = {"edges": values(loss.importance_ratio_histogram_edges(device=torch.device("cpu")))}
    edges = loss.importance_ratio_histogram_edges(device=torch.device("cpu"))
    quantiles = []
    for sparse in (0.0, 0.9, 0.99):
        counts = torch.randint(0, 50, (edges.numel() + 1,), generator=generator).float()
        counts[torch.rand(counts.shape, generator=generator) < sparse] = 0.0
        for q in (0.0, 0.05, 0.5, 0.95, 0.99, 1.0):
            quantiles.append(loss.histogram_quantile(counts, edges, q).item())
    quantiles.append(loss.histogram_quantile(torch.zeros(258), edges, 0.5).item())
    out["quantiles"] = quantiles
    runs = []
    for config in CONFIGS:
        accumulator = loss.LossOffPolicyDiagnosticsAccumulator()
        calls = []
        for spread in (0.3, 3.0, 12.0):  # log-ratios up to about ±spread: the histogram's range
            inputs = packed(generator, 3, 12)
            noise = torch.randn((3, 12), generator=generator, dtype=torch.float64) * spread
            new = (torch.nan_to_num(inputs["logprobs"], nan=-1.0) + noise).clamp(max=0.0)
            new = torch.roll(new, -1, dims=1).requires_grad_(True)  # aligned: scores token t+1
            ref = new.detach() + torch.randn((3, 12), generator=generator, dtype=torch.float64)
            entropies = torch.rand((3, 12), generator=generator, dtype=torch.float64)
            for reduction in ("mean", "sum"):
                result = loss.loss_fn(
                    loss.LossInputs(inputs=inputs), new, ref, entropies, config, reduction
                )
                (grad,) = torch.autograd.grad(result.policy_loss, new)
                diagnostics = result.offpolicy_diagnostics
                accumulator.add(diagnostics)
                calls.append(
                    {
                        "policy_loss": result.policy_loss.item(),
                        "policy_loss_sum": result.policy_loss_sum.item(),
                        "grad": values(grad),
                        "entropy": result.entropy.item(),
                        "probs_corr": result.probs_corr.item(),
                        "kl_policy_ref": values(result.kl_policy_ref),
                        "ratio_sum": diagnostics.ratio_sum.item(),
                        "clipped_count": diagnostics.clipped_count.item(),
                        "token_count": diagnostics.token_count.item(),
                        "ratio_histogram": values(diagnostics.ratio_histogram),
                    }
                )
        runs.append({"calls": calls, "metrics": accumulator.to_metrics()})
    out["runs"] = runs
    print(json.dumps(out))


main()
