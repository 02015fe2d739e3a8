"""An attack's checked settings (`AttackContext`) are set once and never changed: what the attack
finds while it runs (the directions it takes, the ReLU calls its surrogate intercepts) is its
`AttackState`'s, so one context can run an attack twice with the same result."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from robust_train.attacks import AttackGoal, AttackOptions, _loop
from robust_train.attacks.fragility import _context

OPTIONS = AttackOptions(epsilon=0.1, n_steps=2, k=4, step_size=0.05)


def _relu_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    )


def _run(ctx: _loop.AttackContext) -> tuple[_loop.AttackState, torch.Tensor]:
    state = _loop.start(ctx)
    for direction in state.directions:
        for restart, seed in enumerate(ctx.seeds):
            _loop.run_restart(ctx, state, restart, seed, direction)
    return state, _loop.finish(ctx, state).topk_intersection


def test_the_context_is_frozen_and_the_state_holds_what_the_attack_finds() -> None:
    model, x = _relu_net(), torch.rand(4, 1, 4, 4)
    ctx = _context(
        model, x, model(x).argmax(1), goal=AttackGoal("saliency", "topk"),
        generator=None, seed=0, progress=False, options=OPTIONS,
    )  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.options = OPTIONS  # type: ignore[misc]
    first, scores = _run(ctx)
    assert [d.name for d in first.directions] and first.relu_calls > 0
    again, scores_again = _run(ctx)  # the same context: the same attack, counted afresh
    assert again.relu_calls == first.relu_calls
    torch.testing.assert_close(scores_again, scores, equal_nan=True)
