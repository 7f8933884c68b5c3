"""`arthex.art.loss` against worked examples: ART 0.5.23's `loss_fn` (art/loss.py) written out
in numpy, step by step as ART documents it (shift, mask, unknown old logprobs, ratio, clip,
KL shaping, weights, "mean"/"sum" reduction, entropy, the off-policy diagnostics and their
ratio histogram), on small tensors. tests/interop/test_art_loss.py runs ART's own `art.loss`
beside arthex's on the same tensors."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from arthex.art import loss as art_loss  # noqa: E402
from arthex.core.errors import InvalidInputError  # noqa: E402

NAN = math.nan

# One row of 5 positions, unshifted as ART packs it: tokens 2..4 are the assistant's.
MASK = [0, 0, 1, 1, 1]
OLD = [NAN, NAN, -1.0, -0.5, NAN]  # the last assistant token's sampling logprob is unknown
ADV = [0.0, 0.0, 1.5, -1.0, 2.0]
WEIGHTS = [0.0, 0.0, 1.0, 1.0, 0.5]
GROUPS = [0, 0, 1, 1, 1]
ENTROPIES = [0.9, 0.8, 0.7, 0.6, 0.5]  # unshifted, as ART's LossInputs path expects
# The policy's logprob of each next token, aligned (position t scores token t+1); positions
# outside the mask carry garbage, NaN included, that ART's loss must ignore.
NEW = [-9.0, -0.2, -2.0, -0.7, NAN]
REF = [0.0, -0.5, -1.5, -1.0, 0.0]


def shifted(values: list[float], pad: float) -> Any:
    return np.array([*values[1:], pad], dtype=np.float64)


def oracle(config: dict[str, Any], reduction: str = "mean") -> dict[str, Any]:
    """ART's loss_fn on the example, in numpy."""
    mask = shifted([float(m) for m in MASK], 0.0) > 0
    old = np.where(mask, shifted(OLD, NAN), 0.0)
    adv = shifted(ADV, 0.0)
    weights = shifted(WEIGHTS, 0.0)
    new = np.where(mask, np.array(NEW), 0.0)
    ref = np.where(mask, np.array(REF), 0.0)
    old = np.where(np.isfinite(old), old, new)
    ratio = np.exp(np.clip(new - old, -20, 20))
    ppo = config.get("ppo", False)
    eps = config.get("epsilon", 0.2 if ppo else 1.0)
    eps_high = config.get("epsilon_high", None if ppo else 4.0)
    eps_high = eps if eps_high is None else eps_high
    out: dict[str, Any] = {}
    coef = config.get("kl_penalty_coef", 0.0)
    if coef > 0:
        kl = (new - ref) * mask
        avg = kl.sum() / mask.sum()
        adv = adv + coef * (avg - kl) * mask
        out["kl"] = avg
    clipped = np.clip(ratio, 1 - eps, 1 + eps_high)
    terms = -np.minimum(ratio * adv, clipped * adv) if ppo else -clipped * adv * new
    terms = terms * weights * mask
    denominator = mask.sum() if reduction == "mean" else 1.0
    ent = np.where(mask, shifted(ENTROPIES, 0.0), 0.0)
    # the diagnostics: ratios of the trained tokens (assistant, non-zero weight), the clip acting
    trained = mask & (weights != 0)
    low, high = 1 - eps, 1 + eps_high
    if ppo:
        acts = ((adv > 0) & (ratio > high)) | ((adv < 0) & (ratio < low))
    else:
        acts = (ratio < low) | (ratio > high)
    edges = 10.0 ** np.linspace(-4, 4, 257)
    buckets = np.searchsorted(edges, ratio[trained], side="left")
    out |= {
        "ratio_sum": ratio[trained].sum(),
        "clipped": float((acts & trained).sum()),
        "tokens": float(trained.sum()),
        "histogram": np.bincount(buckets, minlength=258),
    }
    out |= {
        "loss": terms.sum() / denominator,
        "sum": terms.sum(),
        "entropy": (ent * weights * mask).sum() / denominator,
    }
    # d loss / d new, ratio held fixed for CISPO; PPO's gradient flows through the ratio
    if ppo:
        unclipped = (ratio * adv <= clipped * adv) | ((ratio >= 1 - eps) & (ratio <= 1 + eps_high))
        grad = np.where(unclipped, -adv * ratio, 0.0)
    else:
        grad = -clipped * adv
    out["grad"] = grad * weights * mask / denominator
    return out


def inputs() -> Any:
    tensors = {
        "assistant_mask": torch.tensor([[bool(m) for m in MASK]]),
        "logprobs": torch.tensor([OLD], dtype=torch.float64),
        "advantages": torch.tensor([ADV], dtype=torch.float64),
        "weights": torch.tensor([WEIGHTS], dtype=torch.float64),
        "group_ids": torch.tensor([GROUPS]),
    }
    return art_loss.LossInputs(inputs=tensors)


def run(config: dict[str, Any], reduction: Any = "mean") -> tuple[Any, Any]:
    new = torch.tensor([NEW], dtype=torch.float64, requires_grad=True)
    result = art_loss.loss_fn(
        inputs(),
        new,
        torch.tensor([REF], dtype=torch.float64),
        torch.tensor([ENTROPIES], dtype=torch.float64),
        config,
        reduction,
    )
    result.policy_loss.backward()  # type: ignore[no-untyped-call]
    return result, new.grad


CASES = [
    pytest.param({}, "mean", id="cispo-defaults"),
    pytest.param({"epsilon": 0.2, "epsilon_high": 0.2}, "mean", id="cispo-clipped"),
    pytest.param({"ppo": True}, "mean", id="ppo"),
    pytest.param({"ppo": True, "epsilon_high": 0.3}, "sum", id="ppo-asymmetric-sum"),
    pytest.param({"kl_penalty_coef": 0.1}, "mean", id="cispo-kl"),
    pytest.param({"ppo": True, "kl_penalty_coef": 0.5}, "sum", id="ppo-kl-sum"),
]


@pytest.mark.parametrize(("config", "reduction"), CASES)
def test_loss_fn_matches_the_worked_example(config: dict[str, Any], reduction: str) -> None:
    expected = oracle(config, reduction)
    result, grad = run(config, reduction)
    assert result.reduction == reduction
    assert result.policy_loss.item() == pytest.approx(expected["loss"], rel=1e-9)
    assert result.policy_loss_sum.item() == pytest.approx(expected["sum"], rel=1e-9)
    assert result.entropy is not None
    assert result.entropy.item() == pytest.approx(expected["entropy"], rel=1e-9)
    np.testing.assert_allclose(grad.numpy()[0], expected["grad"], rtol=1e-9, atol=1e-12)
    if "kl" in expected:
        assert result.kl_policy_ref is not None
        assert result.kl_policy_ref.item() == pytest.approx(expected["kl"], rel=1e-9)
    else:
        assert result.kl_policy_ref is None
    diagnostics = result.offpolicy_diagnostics
    assert diagnostics is not None
    assert diagnostics.ratio_sum.dtype == torch.float32
    assert diagnostics.ratio_sum.item() == pytest.approx(expected["ratio_sum"], rel=1e-6)
    assert diagnostics.clipped_count.item() == expected["clipped"]
    assert diagnostics.token_count.item() == expected["tokens"]
    assert diagnostics.ratio_histogram.tolist() == expected["histogram"].tolist()


def test_hand_computed_values() -> None:
    """The first cases by hand: ratios exp(0.8), exp(-1.5) and 1 (unknown old logprob)."""
    r1, r2 = math.exp(0.8), math.exp(-1.5)
    cispo = (-r1 * 1.5 * -0.2 - r2 * -1.0 * -2.0 - 1.0 * 2.0 * -0.7 * 0.5) / 3
    assert run({})[0].policy_loss.item() == pytest.approx(cispo, rel=1e-12)
    ppo = (-min(r1 * 1.5, 1.2 * 1.5) - min(r2 * -1.0, 0.8 * -1.0) - 2.0 * 0.5) / 3
    assert run({"ppo": True})[0].policy_loss.item() == pytest.approx(ppo, rel=1e-12)
    assert ppo == pytest.approx((-1.8 + 0.8 - 1.0) / 3)
    # the two known old logprobs rise where the policy's fall: correlation -1
    assert run({})[0].probs_corr.item() == pytest.approx(-1.0)


def test_aligned_inputs_take_entropies_as_given() -> None:
    aligned = inputs().align_inputs()
    assert aligned.assistant_mask.tolist() == [[False, True, True, True, False]]
    both = art_loss.AlignedLossInputs(
        assistant_mask=aligned.assistant_mask,
        old_logprobs=aligned.old_logprobs,
        advantages=aligned.advantages,
        weights=aligned.weights,
        group_ids=aligned.group_ids,
        entropies_are_aligned=True,
    )
    entropies = torch.tensor([[0.0, 0.3, 0.2, 0.4, 9.0]], dtype=torch.float64)
    new = torch.tensor([NEW], dtype=torch.float64)
    result = art_loss.loss_fn(both, new, None, entropies, {}, "sum")
    assert result.entropy is not None
    assert result.entropy.item() == pytest.approx(0.3 * 1 + 0.2 * 1 + 0.4 * 0.5)
    assert result.kl_policy_ref is None  # no reference logprobs: no KL
    assert art_loss.loss_fn(both, new, None, None, {}).entropy is None


def test_shift_tensor() -> None:
    shifted_values = art_loss.shift_tensor(torch.tensor([[1, 2, 3], [4, 5, 6]]), 0)
    assert shifted_values.tolist() == [[2, 3, 0], [5, 6, 0]]
    with pytest.raises(InvalidInputError, match=r"\[rows, len\]"):
        art_loss.shift_tensor(torch.tensor([1, 2, 3]), 0)


def test_compute_probs_corr() -> None:
    old = [-0.1, -2.0, NAN, -0.7, -1.2]
    new = [-0.3, -1.5, -0.2, -0.9, -2.5]
    keep = [0, 1, 3, 4]
    expected = np.corrcoef(np.exp(np.array(old)[keep]), np.exp(np.array(new)[keep]))[0, 1]
    got = art_loss.compute_probs_corr(
        torch.tensor(old, dtype=torch.float64), torch.tensor(new, dtype=torch.float64)
    )
    assert got.item() == pytest.approx(expected, rel=1e-12)
    one = torch.tensor([-1.0, NAN])
    assert art_loss.compute_probs_corr(one, torch.tensor([-1.0, -2.0])).item() == 0.0
    flat = torch.tensor([-1.0, -1.0, -1.0])
    assert art_loss.compute_probs_corr(flat, torch.tensor([-1.0, -2.0, -3.0])).item() == 0.0


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"importance_sampling_level": "sequence"}, "importance_sampling_level"),
        ({"kl_penalty_source": "sample"}, "kl_penalty_source"),
        ({"mask_prob_ratio": True}, "mask_prob_ratio"),
        ({"kimi_k2_tau": 0.1}, "kimi_k2_tau"),
        ({"truncated_importance_sampling": 2.0}, "truncated_importance_sampling"),
        ({"max_negative_advantage_importance_sampling_weight": 3.0}, "max_negative"),
        ({"epsilon": "wide"}, "epsilon"),
    ],
)
def test_settings_arthex_lacks_are_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        run(config)


def test_bad_shapes_and_reductions_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="shape"):
        art_loss.loss_fn(inputs(), torch.zeros((1, 4)), None, None, {})
    with pytest.raises(InvalidInputError, match="reduction"):
        art_loss.loss_fn(inputs(), torch.zeros((1, 5)), None, None, {}, "max")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="group_ids"):
        art_loss.LossInputs(inputs={"assistant_mask": torch.zeros((1, 2))}).align_inputs()


def test_float16_logprobs_are_scored_in_float32() -> None:
    """A log-ratio of 12 (ratio e^12, past float16's range): arthex upcasts to float32, as its
    trainer scores tokens, so the loss is the float32 one and finite."""
    tensors = {
        "assistant_mask": torch.tensor([[False, True]]),
        "logprobs": torch.tensor([[NAN, -12.5]]),
        "advantages": torch.tensor([[0.0, 1.0]]),
        "weights": torch.tensor([[0.0, 1.0]]),
        "group_ids": torch.tensor([[0, 0]]),
    }
    new = torch.tensor([[-0.5, 0.0]], dtype=torch.float16)
    result = art_loss.loss_fn(art_loss.LossInputs(inputs=tensors), new, None, None, {"ppo": True})
    assert result.policy_loss.dtype == torch.float32
    # PPO, A = 1, ratio e^12 clipped to 1.2: -1.2 over one token
    assert result.policy_loss.item() == pytest.approx(-1.2, rel=1e-6)


# -- the off-policy diagnostics: ART's ratio histogram and its quantiles ------------------------


def test_the_histogram_edges_are_257_log_spaced_float32_values() -> None:
    edges = art_loss.importance_ratio_histogram_edges(device="cpu")
    assert edges.dtype == torch.float32 and edges.shape == (257,)
    expected = 10.0 ** np.linspace(-4.0, 4.0, 257)
    np.testing.assert_allclose(edges.numpy(), expected, rtol=1e-6)
    assert edges[128].item() == pytest.approx(1.0)  # 32 edges a decade: 1 is the middle one


@pytest.mark.parametrize(
    ("counts", "quantile", "expected"),
    [
        # edges 1, 2, 4: buckets [0, 1], (1, 2], (2, 4], above 4 (ending at 4)
        ([0, 2, 2, 0], 0.5, 2.0),  # the 2nd of 4 values: the top of (1, 2]
        ([0, 2, 2, 0], 0.75, 3.0),  # the 3rd: half-way through (2, 4]
        ([0, 2, 2, 0], 0.0, 0.0),  # nothing wanted: the bottom of the first bucket
        ([1, 0, 0, 0], 0.5, 0.5),  # half of one value in [0, 1]
        ([0, 0, 0, 3], 0.5, 4.0),  # above the last edge: the last edge
        ([0, 0, 0, 0], 0.95, 0.0),  # empty
    ],
)
def test_histogram_quantile_worked_examples(
    counts: list[int], quantile: float, expected: float
) -> None:
    edges = torch.tensor([1.0, 2.0, 4.0])
    histogram = torch.tensor(counts, dtype=torch.float32)
    got = art_loss.histogram_quantile(histogram, edges, quantile)
    assert got.shape == () and got.item() == pytest.approx(expected)


def test_histogram_quantile_refuses_bad_shapes_and_quantiles() -> None:
    edges = torch.tensor([1.0, 2.0])
    with pytest.raises(InvalidInputError, match="1-d"):
        art_loss.histogram_quantile(torch.zeros((2, 3)), edges, 0.5)
    with pytest.raises(InvalidInputError, match="quantile"):
        art_loss.histogram_quantile(torch.ones(3), edges, 1.5)


def diagnostics_of(ratios: list[float], advantages: list[float], ppo: bool) -> Any:
    count = len(ratios)
    return art_loss.LossOffPolicyDiagnostics.from_tensors(
        prob_ratio=torch.tensor([ratios]),
        advantages=torch.tensor([advantages]),
        assistant_mask=torch.ones((1, count)),
        weights=torch.ones((1, count)),
        ppo=ppo,
        epsilon=0.2,
        epsilon_high=0.2,
    )


def test_ppo_counts_only_the_tokens_its_clip_acts_on() -> None:
    ratios, advantages = [1.5, 1.5, 0.5, 0.5, 1.0], [1.0, -1.0, 1.0, -1.0, 1.0]
    # outside [0.8, 1.2]: four tokens; PPO's minimum takes the clipped term for two of them
    assert diagnostics_of(ratios, advantages, ppo=False).clipped_count.item() == 4
    assert diagnostics_of(ratios, advantages, ppo=True).clipped_count.item() == 2


def test_untrained_tokens_are_not_counted() -> None:
    diagnostics = art_loss.LossOffPolicyDiagnostics.from_tensors(
        prob_ratio=torch.tensor([[3.0, 2.0, 5.0]]),
        advantages=torch.ones((1, 3)),
        assistant_mask=torch.tensor([[1.0, 0.0, 1.0]]),
        weights=torch.tensor([[1.0, 1.0, 0.0]]),  # a zero weight trains nothing
        ppo=False,
        epsilon=1.0,
        epsilon_high=4.0,
    )
    assert diagnostics.token_count.item() == 1 and diagnostics.ratio_sum.item() == 3.0
    empty = art_loss.LossOffPolicyDiagnostics.from_tensors(
        prob_ratio=torch.ones((1, 2)),
        advantages=torch.ones((1, 2)),
        assistant_mask=torch.zeros((1, 2)),
        weights=torch.ones((1, 2)),
        ppo=True,
        epsilon=0.2,
        epsilon_high=0.2,
    )
    assert empty.token_count.item() == 0 and empty.ratio_histogram.shape == (258,)
    assert empty.ratio_histogram.sum().item() == 0
    with pytest.raises(TypeError, match="ratio_sum"):
        art_loss.LossOffPolicyDiagnostics(
            ratio_sum=1.0,  # type: ignore[arg-type]
            clipped_count=torch.zeros(()),
            token_count=torch.zeros(()),
            ratio_histogram=torch.zeros(258),
        )


def test_the_accumulator_gives_arts_step_metrics() -> None:
    accumulator = art_loss.LossOffPolicyDiagnosticsAccumulator()
    assert accumulator.to_metrics() == {}
    accumulator.add(None)
    assert accumulator.to_metrics() == {}
    # 19 ratios of exactly 1 and one of 1.5 (outside [0.8, 1.2]), over two loss calls
    accumulator.add(diagnostics_of([1.0] * 12, [1.0] * 12, ppo=False))
    accumulator.add(None)
    accumulator.add(diagnostics_of([1.0] * 7 + [1.5], [1.0] * 8, ppo=False))
    assert accumulator.token_count is not None and accumulator.token_count.item() == 20
    metrics = accumulator.to_metrics()
    # the quantiles are read off the histogram: the 19 ones sit in the bucket (10^-1/32, 1],
    # so p95 (the 19th value) is its top, and p99 (19.8th) lies 0.8 of the way into 1.5's
    # bucket, (10^(5/32), 10^(6/32)]
    low, high = 10 ** (5 / 32), 10 ** (6 / 32)
    assert metrics == pytest.approx(
        {
            "loss/importance_ratio_mean": (19 + 1.5) / 20,
            "loss/importance_ratio_p95": 1.0,
            "loss/importance_ratio_p99": low + (high - low) * 0.8,
            "loss/clipped_token_fraction": 1 / 20,
        },
        rel=1e-5,
    )


def test_the_accumulator_sums_over_a_process_group(tmp_path: Path) -> None:
    """`to_metrics(group=...)` sums the tallies over torch.distributed's group first: a real
    one-process gloo group on a file store, whose sum is the tallies themselves."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        accumulator = art_loss.LossOffPolicyDiagnosticsAccumulator()
        accumulator.add(diagnostics_of([0.5, 2.0], [1.0, 1.0], ppo=False))
        assert accumulator.to_metrics(group=dist.group.WORLD) == accumulator.to_metrics()
    finally:
        dist.destroy_process_group()
