"""The fragility part: attacks on the explanations of held-out images (Ghorbani et al. 2019).

For every explainer and every attack objective of the settings (an explainer that cannot be
differentiated gets only the objectives that need no gradient), the correctly classified
images (all images, with their predicted class, when `correct_only` is False) are attacked with
`robust_train.attacks.fragility_attack` and each image's measures are reported under
`attack/<explainer>/<objective>/<measure>`; images not attacked get NaN. Images the attack could
not move are NaN too and counted in `.../n_unmeasured` (never robust). `n_attacked` counts the
attacked images.

Beside the attacks of each explainer, per attacked image: `fragility/<explainer>/blank_map` (1
where the clean map is constant, e.g. an all-zero Grad-CAM map after its ReLU: such an image has
no top-k set, so no attack measures it, and a model that draws blank maps would otherwise look
robust; its mean is the share of blank maps among the attacked images), and for a layer
explainer (`ExplainerSpec.layer`: Grad-CAM, whose maps can explain nothing at a poor layer)
`fragility/<explainer>/fidelity`, the fidelity estimate AUC_LIF - AUC_MIF (Brocki & Chung 2022;
the settings' `fidelity_steps` and `fidelity_perturbation`) of the same clean maps, so that its
robustness is never read without what the map explains.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from robust_train.attacks import fragility_attack, get_objective
from robust_train.attacks.defaults import target_region
from robust_train.attacks.result import FragilityResult
from robust_train.evaluation.measures import Measure, attack_key, part_key, register_measure
from robust_train.evaluation.parts.base import (
    AttackExamples,
    EvaluationPart,
    PartOutput,
    register_part,
)
from robust_train.explain import (
    bind_settings,
    explainer_name,
    explainer_spec,
    is_differentiable,
)
from robust_train.metrics.functional import fidelity_curves, fidelity_estimate

__all__ = ["FragilityPart"]

N_EXAMPLES = 4

register_measure(
    Measure(
        "clean_region_mass",
        "clean map mass in target region",
        None,
        meaning="the clean map's share in the targeted attack's region: the reference its "
        "`region_mass` is read against",
    )
)
register_measure(
    Measure(
        "improved",
        "images the attack moved",
        None,
        meaning="share of attacked images where a label-keeping iterate beat the clean input "
        "(0 means the attack found nothing within its budget)",
    )
)


register_measure(
    Measure(
        "blank_map",
        "blank clean maps",
        False,
        meaning="share of the attacked images whose clean map is constant (an all-zero Grad-CAM "
        "map): no top-k set, so no attack measures them and they are left out of its means; a "
        "model can look robust by drawing blank maps",
    )
)


@register_part("fragility")
class FragilityPart(EvaluationPart):
    """Every attack of the settings on every attacked explainer (see the module docstring)."""

    def pairs(self) -> list[tuple[object, str]]:
        """(explainer, objective) pairs attacked: an objective that follows a gradient needs a
        differentiable explainer."""
        return [
            (explainer, attack)
            for explainer in self.settings.explainers
            for attack in self.settings.attacks
            if is_differentiable(explainer) or not get_objective(attack).needs_gradient
        ]

    def keys(self) -> tuple[str, ...]:
        keys = ["n_attacked"]
        for explainer, attacks in self._by_explainer():
            name = explainer_name(explainer)
            keys += [attack_key(name, a, m) for a in attacks for m in _measures(a)]
            keys += [part_key("fragility", name, m) for m in self.map_measures(explainer)]
        return tuple(keys)

    def work(self) -> float:
        """Explainer calls per image: every attack's restarts x (steps + 1), or its noise
        draws for the random-sign baseline."""
        return float(sum(self._attack_work(attack) for _, attack in self.pairs()))

    def _attack_work(self, attack: str) -> int:
        s = self.settings
        if not get_objective(attack).needs_gradient:
            return s.noise_draws + 1
        return s.n_restarts * (s.n_steps + 1)

    def map_measures(self, explainer: object) -> tuple[str, ...]:
        """Measures of the explainer's clean maps reported beside its attacks."""
        return _map_measures(explainer)

    def _by_explainer(self) -> list[tuple[object, list[str]]]:
        """Each attacked explainer with its objectives, in the order of `pairs`."""
        pairs = self.pairs()
        explainers = list(dict.fromkeys(e for e, _ in pairs))
        return [(e, [a for f, a in pairs if f is e]) for e in explainers]

    def run(
        self, model: nn.Module, inputs: Tensor, labels: Tensor, predictions: Tensor
    ) -> PartOutput:
        s = self.settings
        attacked = (
            predictions == labels if s.correct_only else torch.ones_like(labels, dtype=torch.bool)
        )
        target = labels if s.correct_only else predictions
        out = PartOutput(values={"n_attacked": attacked.float()})
        x, y = inputs[attacked], target[attacked]
        for explainer, attacks in self._by_explainer():
            name, clean = explainer_name(explainer), None
            for attack in attacks:
                result = self.attack(model, x, y, explainer, attack)
                self.advance(self._attack_work(attack))
                for measure, value in _values(result, attacked, _measures(attack)).items():
                    out.values[attack_key(name, attack, measure)] = value
                if result is not None:
                    clean = result.clean_map
                if result is not None:  # every explainer's grids (Grad-CAM's too)
                    out.examples[attack_key(name, attack, "examples")] = _examples(
                        name, attack, s.epsilon, x, result
                    )
            for measure in self.map_measures(explainer):
                full = torch.full(attacked.shape, float("nan"), device=attacked.device)
                if clean is not None:
                    full[attacked] = self._map_value(measure, model, x, y, clean).to(full.device)
                out.values[part_key("fragility", name, measure)] = full
        return out

    def _map_value(
        self, measure: str, model: nn.Module, x: Tensor, y: Tensor, maps: Tensor
    ) -> Tensor:
        """Per attacked image: 1.0 where its clean map is constant ("blank_map"), or the
        fidelity estimate of its clean map ("fidelity")."""
        if measure == "blank_map":
            flat = maps.flatten(1)
            return (flat.amax(1) == flat.amin(1)).float()
        curves = fidelity_curves(
            model,
            x,
            y,
            maps,
            n_steps=self.settings.fidelity_steps,
            perturbation=self.settings.fidelity_perturbation,
            internal_batch_size=self.settings.internal_batch_size,
            seed=self.settings.seed,
        )
        return fidelity_estimate(curves)

    def attack(
        self, model: nn.Module, x: Tensor, y: Tensor, explainer: object, attack: str
    ) -> FragilityResult | None:
        """One attack with the settings (None when no image is attacked)."""
        if not len(x):
            return None
        region = None
        if get_objective(attack).needs_region:
            region = target_region(*x.shape[-2:]).to(x.device)
        return fragility_attack(
            model,
            x,
            y,
            explainer=bind_settings(explainer, self.settings),
            objective=attack,
            target_region=region,
            seed=self.settings.seed,
            progress=self.progress,
            options=self.settings,
        )


def _measures(attack: str) -> tuple[str, ...]:
    """What an attack reports: its objective's `report_metrics` (and the clean map's mass in the
    region, beside an attack that pulls it there), `n_unmeasured`, `improved`."""
    objective = get_objective(attack)
    region = ("clean_region_mass",) if objective.needs_region else ()
    return (*objective.report_metrics, *region, "n_unmeasured", "improved")


def _map_measures(explainer: object) -> tuple[str, ...]:
    """What the part reports of an attacked explainer's clean maps: the blank share, and the
    fidelity of a layer explainer's maps."""
    return ("blank_map", "fidelity") if explainer_spec(explainer).layer else ("blank_map",)


def _values(
    result: FragilityResult | None, attacked: Tensor, measures: tuple[str, ...]
) -> dict[str, Tensor]:
    """The result's per-image values scattered back to the whole batch (NaN where not attacked;
    all NaN when no image was)."""
    values = result.values() if result is not None else {}
    out = {}
    for measure in measures:
        full = torch.full(attacked.shape, float("nan"), device=attacked.device)
        if measure in values:
            full[attacked] = values[measure].to(full.device)
        out[measure] = full
    return out


def _examples(
    name: str, attack: str, epsilon: float | None, x: Tensor, result: FragilityResult
) -> AttackExamples:
    n = min(N_EXAMPLES, len(result))
    return AttackExamples(
        title=f"{attack} attack on {name} (eps={epsilon:.3g})",
        inputs=x[:n].detach().cpu(),
        clean_maps=result.clean_map[:n].detach().cpu(),
        adversarial=result.adversarial[:n].detach().cpu(),
        attacked_maps=result.attacked_map[:n].detach().cpu(),
        scores=result.topk_intersection[:n].detach().cpu(),
    )
