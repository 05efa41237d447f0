"""The DP mode's accountant (`raysampler.privacy.accountant`) against dp-accounting's own composition.

Each unadjusted Langevin step with step γ and clip C is a Gaussian mechanism with sensitivity γC and noise sd
√(2γ), i.e. noise multiplier σ/Δ = √(2γ)/(γC): composing one `GaussianDpEvent` per step in dp-accounting's
`RdpAccountant` must give the closed form's RDP at every order and its ε(δ) to 1e-6."""

from __future__ import annotations

import itertools
import math

import dp_accounting
import numpy as np
import pytest

from raysampler.errors import ArgumentError
from raysampler.privacy.accountant import RDP_ORDERS, DPAccount, DPPlan, epsilon, langevin_rdp, step_sum_within
from raysampler.privacy.dp import DP, as_dp

#: step-size sequences: equal steps, unequal steps (a geometric decay), and two sites' worth of mixed sizes
SEQUENCES = {
    "equal": [1e-4] * 400,
    "geometric": list(1e-3 * 0.99 ** np.arange(300)),
    "mixed": [2e-5] * 1000 + [3e-4] * 50 + [7e-6] * 2000,
}


def _composed(gammas, clip, orders=RDP_ORDERS):
    """dp-accounting's RDP of one Gaussian event per step (a run of equal steps as one self-composed event)."""
    accountant = dp_accounting.rdp.RdpAccountant(list(orders))
    for g, run in itertools.groupby(gammas):
        event = dp_accounting.GaussianDpEvent(math.sqrt(2.0 * g) / (g * clip))
        accountant.compose(dp_accounting.SelfComposedDpEvent(event, len(list(run))))
    return accountant


@pytest.mark.parametrize("name", sorted(SEQUENCES))
@pytest.mark.parametrize("clip", [0.5, 3.0])
def test_epsilon_matches_dp_accounting_composition(name, clip):
    gammas = SEQUENCES[name]
    theirs = _composed(gammas, clip)
    for delta in (1e-5, 1e-7):
        ours = epsilon(clip, float(np.sum(gammas)), delta)
        assert ours == pytest.approx(theirs.get_epsilon(delta), abs=1e-6)
        assert ours > 0.01  # the sequences spend a budget worth checking


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_rdp_closed_form_matches_dp_accounting_at_every_order(name):
    gammas, clip = SEQUENCES[name], 1.7
    theirs = _composed(gammas, clip)
    np.testing.assert_allclose(langevin_rdp(clip, float(np.sum(gammas))), theirs._rdp, rtol=1e-9, atol=0)


def test_step_sum_within_is_the_largest_within_budget():
    for budget in (0.5, 1.0, 8.0):
        s = step_sum_within(budget, 1e-5, 2.0)
        assert epsilon(2.0, s, 1e-5) <= budget
        assert epsilon(2.0, s * (1 + 1e-9), 1e-5) > budget - 1e-9
    # four times the clip, a sixteenth of the step sum: (P2) depends on C² S only
    assert step_sum_within(1.0, 1e-5, 4.0) == pytest.approx(step_sum_within(1.0, 1e-5, 1.0) / 16, rel=1e-9)


def test_plan_counts_every_chain_and_site():
    plan = DPPlan.of(1.0, 1e-5, 1.0, np.array([1e-4, 2e-4]), chains=4)
    steps = np.array([100, 100])
    np.testing.assert_allclose(plan.step_sums(steps), [4 * 1e-4 * 100, 4 * 2e-4 * 100])
    spent = plan.spent(steps)
    assert spent[1] > spent[0] and spent[0] == pytest.approx(epsilon(1.0, 0.04, 1e-5))
    n = plan.rounds_within(np.array([5, 5]))
    assert plan.allows(5 * n * np.ones(2, dtype=int)) and not plan.allows(5 * (n + 1) * np.ones(2, dtype=int))
    account = DPAccount.empty(2).after(np.array([5, 5]), np.array([3.0, 0.0]), np.array([10.0, 10.0]))
    np.testing.assert_allclose(account.clip_rate(), [0.3, 0.0])


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"epsilon": 0.0}, ("privacy", "epsilon")),
        ({"epsilon": float("inf")}, ("privacy", "epsilon")),
        ({"delta": 1.0}, ("privacy", "delta")),
        ({"clip": -1.0}, ("privacy", "clip")),
        ({"clip": True}, ("privacy", "clip")),
    ],
)
def test_dp_settings_refuse_bad_values_naming_the_field(fields, path):
    with pytest.raises(ArgumentError) as err:
        DP(**fields)
    assert err.value.path == path


def test_as_dp_reads_a_mapping_and_refuses_other_fields():
    assert as_dp({"epsilon": 2.0, "clip": 0.5}) == DP(2.0, 1e-5, 0.5)
    with pytest.raises(ArgumentError) as err:
        as_dp({"eps": 1.0})
    assert err.value.path == ("privacy", "eps")
