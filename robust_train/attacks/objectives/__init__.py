"""Fragility objectives, one file each, registered by name in `OBJECTIVES`.

Ghorbani, Abid & Zou, "Interpretation of Neural Networks is Fragile" (AAAI 2019). With I(x) the
importance map normalised to sum 1:
- "topk": ascend -sum_{i in B} I(x)_i, B the clean top-k set; ranked by lower top-k intersection.
- "mass_center": ascend ||C(x) - C(x_0)||_2, C the center of mass; ranked by larger shift.
- "targeted": ascend sum_i I(x)_i T_i for a binary region T; ranked by larger mass inside T.
- "random_sign": no gradient: x + epsilon * s, s uniform random signs, the worst of
  `noise_draws` draws; ranked like "topk" (the noise baseline at the budget).
- "random_walk": no gradient: `n_steps` random sign steps of `step_size`; ranked like "topk".

Importing this package imports every file in it (`discover`), so a new objective is one new
file. The registry and the base class are `robust_train.attacks.objectives.base`'s, and the public
names are `robust_train.attacks`' (`OBJECTIVES`, `FragilityObjective`, `get_objective`,
`register_objective`).
"""

from robust_train.core.registry import discover

discover(__name__)
