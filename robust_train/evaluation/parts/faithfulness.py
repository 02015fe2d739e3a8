"""The faithfulness part: faithfulness correlation of each explainer (Bhatt, Weller, Moura,
IJCAI 2020), a second faithfulness measure beside the fidelity estimate of `parts/fidelity.py`.

Per image, `faithfulness_runs` random subsets of `faithfulness_subset` pixels are replaced by the
fill of the fidelity curves (`fidelity_perturbation`, so both measures remove pixels the same
way) and the Pearson correlation of the logit drops with the attribution sums over the subsets
is reported as `faithfulness/<explainer>/faithfulness_correlation` (higher is more faithful; a
random map scores about 0). The explanation is of the predicted class, with its signs (see
`robust_train.metrics.functional.faithfulness_correlation`).
"""

from __future__ import annotations

from robust_train.evaluation.measures import Measure, part_key, register_measure
from robust_train.evaluation.parts.base import (
    ExplainerMap,
    MapPart,
    PartOutput,
    register_part,
)
from robust_train.metrics.functional import faithfulness_correlation

__all__ = ["FaithfulnessPart"]

MEASURE = register_measure(
    Measure(
        "faithfulness_correlation",
        "faithfulness correlation",
        True,
        meaning="Pearson correlation, over random pixel subsets, of the drop of the predicted "
        "logit when the subset is removed with the sum of the map over it (Bhatt et al. 2020): "
        "higher is more faithful; a random map scores about 0",
    )
)


@register_part("faithfulness")
class FaithfulnessPart(MapPart):
    """Faithfulness correlation of every explainer of the settings, per image."""

    map_measures = (MEASURE.name,)

    def measure(self, item: ExplainerMap, out: PartOutput) -> None:
        s = self.settings
        key = part_key("faithfulness", item.explainer, MEASURE.name)
        out.values[key] = faithfulness_correlation(
            item.model, item.inputs, item.predictions, item.explanation, n_runs=s.faithfulness_runs,
            subset_size=s.faithfulness_subset, perturbation=s.fidelity_perturbation,
            internal_batch_size=s.internal_batch_size, seed=s.seed,
        )  # fmt: skip
