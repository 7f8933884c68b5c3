"""One decode step's arithmetic: drawing the next token of every row of a batch, and scoring
a prompt's own tokens, on float32 logits. The loop around them is decoding.py.
"""

from __future__ import annotations

from typing import Any


def choose(
    logits: Any,
    temperature: Any,
    top_p: Any,
    uniforms: Any,
    top_k: int,
    truncate: Any = None,
) -> tuple[Any, Any, Any, Any]:
    """Draw one token per row with temperature, top-k (`truncate`, 0 for none) and top-p
    (inverse CDF on one uniform per row, so each row's stream depends only on its own
    generator), and report logprobs under the raw distribution."""
    import torch

    raw = torch.log_softmax(logits, dim=-1)
    scaled = logits / temperature.clamp_min(1e-5).unsqueeze(-1)
    if truncate is not None:
        k = truncate.clamp(0, logits.shape[-1])
        kth = scaled.topk(int(k.max()), dim=-1).values.gather(-1, (k - 1).clamp(min=0)[:, None])
        kth = torch.where(k[:, None] > 0, kth, torch.full_like(kth, -torch.inf))
        scaled = scaled.masked_fill(scaled < kth, -torch.inf)
    probs = torch.softmax(scaled, dim=-1)
    if bool((top_p < 1.0).any()):
        # Top-p needs the tokens by probability; plain sampling works in any order.
        probs, order = probs.sort(dim=-1, descending=True)
        mass_before = probs.cumsum(dim=-1) - probs
        probs = probs.masked_fill(mass_before >= top_p.unsqueeze(-1), 0.0)
    else:
        order = None
    cdf = probs.cumsum(dim=-1)
    targets = (uniforms * cdf[:, -1]).unsqueeze(-1)
    # right=True: the first token whose cumulative mass exceeds the target, so a token of
    # zero probability (truncated or underflowed) is never picked, even for a target of 0.
    picks = torch.searchsorted(cdf, targets, right=True).clamp(max=logits.shape[-1] - 1)
    sampled = (picks if order is None else order.gather(-1, picks)).squeeze(-1)
    chosen = torch.where(temperature == 0, logits.argmax(dim=-1), sampled)
    chosen_lp = raw.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
    if top_k:
        top_lps, top_ids = raw.topk(top_k, dim=-1)
    else:
        top_lps = top_ids = raw.new_zeros((logits.shape[0], 0))
    return chosen, chosen_lp, top_ids, top_lps


def prompt_logprobs(logits: Any, input_ids: Any, length: int) -> tuple[float, ...]:
    """The logprob of each prompt token given the ones before it (NaN for the first), from
    one left-padded row's logits [width, vocab]."""
    import torch

    start = input_ids.shape[0] - length
    logp = torch.log_softmax(logits[start:-1], dim=-1)
    picked = logp.gather(-1, input_ids[start + 1 :, None]).squeeze(-1)
    return (float("nan"), *picked.tolist())
