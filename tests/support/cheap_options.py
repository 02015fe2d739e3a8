"""Cheap options for the shared contract tests, by registry name: the tests' own table.

The contract tests run every registered explainer and penalty on tiny models; a unit whose
defaults are expensive (many steps, samples or points) is run at the few given here. Every
registered unit has an entry ({} where its defaults are cheap already), so a new unit without
one fails `explainer_options` / `penalty_options` with a message that says what to add.
"""

from __future__ import annotations

from typing import Any

EXPLAINER_OPTIONS: dict[str, dict[str, Any]] = {
    "saliency": {},
    "input_x_gradient": {},
    "integrated_gradients": {"n_steps": 4, "internal_batch_size": 5},
    "smoothgrad": {"n_samples": 3, "seed": 0, "internal_batch_size": 4},
    "meaningful_perturbation": {"n_iter": 3, "seed": 0},
    "grad_cam": {},
    "lrp": {},
    "deeplift": {},
    "input_reference": {},
}

PENALTY_OPTIONS: dict[str, dict[str, Any]] = {
    "adversarial": {"n_steps": 2, "step_size": 0.1},
    "composed": {"terms": [{"penalty": "gradnorm"}, {"penalty": "curvature"}]},
    "curvature": {},
    "distillation": {},
    "gaussian_noise": {},
    "gradnorm": {},
    "ig_norm": {"n_steps": 2, "n_attack_points": 2, "n_points": 3},
    "ig_sum_norm": {"n_steps": 2, "n_attack_points": 2, "n_points": 3},
    "smoothness": {},
    "lipschitz": {},
    "igr": {"n_ascent_steps": 1, "n_ig_steps": 4},
    "interval_width": {},
    "lga": {},
    "multi_map": {"radius": 0.1},
    "ssr": {"n_iterations": 3},
    "topk_mass": {"k": 4, "n_ascent_steps": 1},
}


def _options(table: dict[str, dict[str, Any]], table_name: str, kind: str, name: str) -> dict:
    if name not in table:
        raise KeyError(
            f"the {kind} {name!r} has no entry in tests/support/cheap_options.py {table_name}: add "
            f"{name!r}: {{}} if its defaults are cheap, else the few steps/samples/points the "
            "contract tests should run it with"
        )
    return dict(table[name])


def explainer_options(name: str) -> dict[str, Any]:
    """The cheap options of explainer `name` (a copy); KeyError naming what to add if none."""
    return _options(EXPLAINER_OPTIONS, "EXPLAINER_OPTIONS", "explainer", name)


def penalty_options(name: str) -> dict[str, Any]:
    """The cheap options of penalty `name` (a copy); KeyError naming what to add if none."""
    return _options(PENALTY_OPTIONS, "PENALTY_OPTIONS", "penalty", name)
