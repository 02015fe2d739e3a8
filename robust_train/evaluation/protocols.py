"""Literature evaluation protocols as presets of `EvaluationSettings`: `PROTOCOLS[name]`.

"rar": the evaluation of Chen, Wu, Rastogi, Liang & Jha, "Robust Attribution Regularization"
(NeurIPS 2019, arXiv 1905.09957) on MNIST, shared by later robust-attribution papers (ART, Singh
et al. 2020): only correctly classified test images are attacked; L_inf budget 0.3; 100 sign
steps of 0.01; the top-k attack of Ghorbani et al. (2019) with attack k 200 and the top-k
intersection reported at k 100 (`measure_k`), with Kendall's tau and Spearman; 3 restarts, the
first from the image and the others from random points of the ball, the worst result kept;
integrated gradients with a zero (black) baseline. Both the saliency map and the IG map are
attacked, and a random-sign row sits beside the attack for each: noise at the budget, x + 0.3 *
uniform random signs clipped to [0, 1], the worst of `noise_draws` = 10 label-keeping draws per
image (`robust_train.attacks.objectives.RandomSign`). Every attack runs all its candidate
directions and keeps the worst per image (`direction="all"`; for saliency and IG that is the
softplus surrogate alone, so it costs nothing here).

CPU-sized where the paper is not: it attacked all 10,000 test images with 100 IG points; the
preset takes the first `n_samples=50` test images (their correctly classified ones are
attacked) and `ig_steps=10` points.
Each image costs 3 restarts x 100 steps of the top-k attack on saliency and on IG (every top-k
step on IG is a double backprop through `ig_steps` points) and 10 noise draws (one map each) on
each. Override both with
`dataclasses.replace(PROTOCOLS["rar"], n_samples=10_000, ig_steps=100)` to reproduce the paper
exactly (a GPU job).

One remaining difference: the paper kept the restart with the lowest Kendall's tau; this attack
keeps, per image, the iterate with the lowest top-k intersection (ties: lowest Spearman) over
all restarts.

"demo": the RAR protocol at the size of `robust-train demo`, on every map users act on. The same
budget (L_inf 0.3), objectives (the top-k attack with attack k 200 and reported k 100,
random-sign noise) and correctly-classified-only rule, aimed in turn at each reported explainer
(`robust_train.explain.reported_explainers()`: saliency, integrated gradients with a zero
baseline, Grad-CAM at its default layer, LRP with the default composite, DeepLIFT), on the first
`n_samples=100` test images, with 20 sign steps of 0.03 (0.6 in all, twice the budget),
1 restart, integrated gradients with 10 points, the Lipschitz estimate with 8 samples and
fidelity curves of 10 steps. Its attack is weaker than RAR's 3 x 100 steps, so models keep more
of their top pixels under it. Both reproduce a fixed protocol, so both run ONE attack per
objective (`ensemble=False`).

"ensemble": the demo's budget, maps, images and scored set under the attack ensemble
(`robust_train.attacks.ensemble_attack`), each image keeping its worst result: the attacked set
equal to the scored set (k 100) and twice it (k 200), the softplus surrogate at betas 1, 3, 10
and 30, the exact gradient where the map has one (Grad-CAM's "model" and "exact" directions),
3 restarts per member (the first from the image, two from random points of the ball) of 40 sign
steps of 0.015, then a random search of 1,000 queries from the best point. Every number of the
demo's maps under the strongest attack the package has; its cost is reported beside it.

"demo_ensemble": the reduced ensemble that `robust-train demo` runs in its few CPU minutes: the
demo's budget, maps, scored set and sign steps (20 of 0.03) on the first `n_samples=20` test
images, with three members (the attacked set equal to the scored set, k 100, and twice it, k 200,
at the surrogate beta 10 and every candidate direction, including the exact gradient where the
map has one; the surrogate at beta 3 on the scored set), 2 restarts per member (the first from
the image, the second from a random point of the ball) and a random search of 100 queries from
the best point. Weaker than "ensemble" (fewer members, restarts, steps and queries), stronger
than "demo"; its own name says which one a number comes from.

"fast": the defaults of `EvaluationSettings` with one attack per objective (`ensemble=False`):
the cheap protocol, as the monitors run during training. The defaults themselves (what
`robust-train evaluate` runs without `--protocol`) run the ensemble.

Examples:
    >>> PROTOCOLS["rar"].epsilon, PROTOCOLS["rar"].n_steps, PROTOCOLS["demo"].n_steps
    (0.3, 100, 20)
    >>> dataclasses.replace(PROTOCOLS["rar"], n_samples=10_000).n_samples
    10000
"""

from __future__ import annotations

import dataclasses

from robust_train.evaluation.settings import EvaluationSettings
from robust_train.explain import reported_explainers

__all__ = ["DEMO", "DEMO_ENSEMBLE", "ENSEMBLE", "FAST", "PROTOCOLS", "RAR"]

RAR = EvaluationSettings(
    n_samples=50,
    explainers=("saliency", "integrated_gradients"),
    attacks=("random_sign", "topk"),
    epsilon=0.3,
    n_steps=100,
    step_size=0.01,
    k=200,
    measure_k=100,
    n_restarts=3,
    correct_only=True,
    ig_steps=10,
    ig_baseline=0.0,
    ensemble=False,
    extra={"protocol": "rar"},
)

DEMO = dataclasses.replace(
    RAR,
    attack=dataclasses.replace(RAR.attack, n_steps=20, step_size=0.03, n_restarts=1),
    n_samples=100,
    explainers=tuple(reported_explainers()),
    ig_steps=10,
    lipschitz_samples=8,
    fidelity_steps=10,
    extra={"protocol": "demo"},
)

ENSEMBLE = dataclasses.replace(
    DEMO,
    attack=dataclasses.replace(DEMO.attack, k=100, n_steps=40, step_size=0.015, n_restarts=3),
    ensemble=True,
    ensemble_betas=(1.0, 3.0, 10.0, 30.0),
    search_queries=1000,
    extra={"protocol": "ensemble"},
)

DEMO_ENSEMBLE = dataclasses.replace(
    DEMO,
    n_samples=20,
    attack=dataclasses.replace(DEMO.attack, k=100, n_restarts=2),
    ensemble=True,
    ensemble_betas=(3.0, 10.0),
    search_queries=100,
    extra={"protocol": "demo_ensemble"},
)

FAST = EvaluationSettings(ensemble=False, extra={"protocol": "fast"})

PROTOCOLS: dict[str, EvaluationSettings] = {
    "rar": RAR,
    "demo": DEMO,
    "ensemble": ENSEMBLE,
    "demo_ensemble": DEMO_ENSEMBLE,
    "fast": FAST,
}
