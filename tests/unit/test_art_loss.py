"""`arthex.art.loss` against worked examples: ART 0.5.23's `loss_fn` (art/loss.py) written out
in numpy, step by step as ART documents it (shift, mask, unknown old logprobs, ratio, clip,
KL shaping, weights, "mean"/"sum" reduction, entropy), on small tensors. ART's own `loss_fn`
needs torch, which ART's venv lacks, so the oracle is this independent computation."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from arthex.art import loss as art_loss  # noqa: E402
from arthex.core.errors import InvalidInputError, NotInArthexError  # noqa: E402

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


def oracle(config: dict[str, Any], reduction: str = "mean") -> dict[str, float]:
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
    out: dict[str, float] = {}
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
    assert result.offpolicy_diagnostics is None


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


@pytest.mark.parametrize(
    "name",
    [
        "LossOffPolicyDiagnostics",
        "LossOffPolicyDiagnosticsAccumulator",
        "histogram_quantile",
        "importance_ratio_histogram_edges",
        "PackedLossInput",
    ],
)
def test_names_without_a_counterpart_are_refused(name: str) -> None:
    with pytest.raises(NotInArthexError, match=f"art.loss.{name}"):
        getattr(art_loss, name)


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
