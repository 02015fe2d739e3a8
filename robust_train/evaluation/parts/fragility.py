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

Chance levels beside them: `fragility/<explainer>/random_topk` and `.../random_lens`, the top-k
and LENS intersections of the clean map with a uniformly random map (the mean of
`CHANCE_DRAWS` draws): what an attack that scrambled the map completely would leave. (LENS's
chance level is the share of the image within one pixel of the clean top-k set, far above
k / (H W).) The reference "map = input" under the same attacks is the input_reference part.

With the ground-truth masks of the evidence (`EvaluationPart.masks`, set by the engine when the
data has them), each attacked image's clean map is scored under
`localisation/<explainer>/<measure>` and its map after each attack under
`attack/<explainer>/<objective>/<measure>` (relevance mass and rank accuracy, pointing game:
`robust_train.evaluation.parts.ground_truth`).

With `ensemble` (the default) every gradient attack is `robust_train.attacks.ensemble_attack`
and each image keeps its worst result over the members; what each attack ran and cost (its
members, the images where each was the worst, seconds, gradient steps and maps per image) is
reported under the notes topic `attack_cost`, key `<explainer>/<objective>`.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.attacks import ensemble_attack, fragility_attack, get_objective
from robust_train.attacks.defaults import target_region
from robust_train.attacks.ensemble import plan_members, single_attack_cost
from robust_train.attacks.result import LENS_WINDOW, FragilityResult
from robust_train.evaluation.cost import unit_costs
from robust_train.evaluation.measures import Measure, attack_key, part_key, register_measure
from robust_train.evaluation.parts.base import (
    AttackExamples,
    EvaluationPart,
    PartOutput,
    register_part,
)
from robust_train.evaluation.parts.ground_truth import (
    LOCALISATION,
    LOCALISATION_MEASURES,
    localisation_scores,
)
from robust_train.explain import (
    bind_settings,
    explainer_name,
    explainer_spec,
    is_differentiable,
)
from robust_train.explain.lens import lens_topk_intersection
from robust_train.explain.similarity import topk_intersection
from robust_train.metrics.functional import fidelity_curves, fidelity_estimate

__all__ = ["FragilityPart"]

N_EXAMPLES = 4
CHANCE_DRAWS = 16
COST = "attack_cost"

for _name, _label, _what in (
    ("random_topk", "top-k intersection of a random map (chance)", "top-k intersection"),
    ("random_lens", "LENS top-k of a random map (chance)", "LENS top-k intersection"),
):
    register_measure(
        Measure(
            _name,
            _label,
            None,
            meaning=f"the {_what} of the clean map with a uniformly random map: the chance "
            "level an attack that scrambled the map completely would leave; read every "
            f"{_what} of this explainer against it",
        )
    )

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

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.costs: dict[str, Any] = {}  # "<explainer>/<objective>" -> its attack's cost

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
            if self.masks is not None:
                keys += [attack_key(name, a, m) for a in attacks for m in LOCALISATION_MEASURES]
                keys += [part_key(LOCALISATION, name, m) for m in LOCALISATION_MEASURES]
        return tuple(keys)

    def work(self) -> float:
        """Work per image, in attack steps (`robust_train.evaluation.cost`): the noise draws of
        the random-sign baseline (a map each); for a gradient attack, its directions x restarts
        x (steps and the start's map), and with `ensemble` that for every member of the
        ensemble (`plan_members`, at least two restarts each) plus the random search's queries
        (a map each); then each attacked explainer's clean-map measures (`_map_work`)."""
        attacks = sum(self._attack_work(attack, e) for e, attack in self.pairs())
        return float(attacks + sum(self._map_work(e) for e, _ in self._by_explainer()))

    def _map_work(self, explainer: object) -> float:
        """The clean-map measures of an attacked explainer, in forwards: its chance levels'
        random maps (each ranked like a forward of the model) and a layer explainer's fidelity
        curves (their forwards)."""
        measures = self.map_measures(explainer)
        draws = CHANCE_DRAWS * sum(m in ("random_topk", "random_lens") for m in measures)
        curves = 2 * self.settings.fidelity_steps if "fidelity" in measures else 0
        return (draws + curves) * unit_costs(explainer, self.settings).forward

    def follows_model(self, explainer: object) -> bool:
        """Whether the explainer's map changes with the model (so that surrogates of its
        ReLUs change the attack's direction)."""
        return True

    def _attack_work(self, attack: str, explainer: object) -> float:
        s, cost = self.settings, unit_costs(explainer, self.settings)
        objective = get_objective(attack)
        if not objective.needs_gradient:
            return (s.noise_draws + 1) * cost.map
        follows = self.follows_model(explainer)
        # "all": "surrogate" alone for a piecewise-constant map, "exact" alone for a map that
        # ignores the model, else "model" and "surrogate" (and "exact" for a map with a final
        # clamp, not known before the probe)
        spec = explainer_spec(explainer)
        one = spec.piecewise_constant or spec.model_free
        n_dirs = 1 if one or s.direction != "all" or s.surrogate_beta is None else 2
        restart = s.n_steps * cost.step + cost.map
        if not s.ensemble:
            return n_dirs * s.n_restarts * restart
        assert s.k is not None and s.measure_k is not None, "resolved settings"
        size = max(s.k, 2 * s.measure_k)  # the image's pixels bound k; 2 m is capped by them
        members = plan_members(objective, s, s.ensemble_betas, size=size, beta_matters=follows)
        restarts = max(s.n_restarts, 2) * restart
        steps = sum((1 if m.direction == "surrogate" else n_dirs) * restarts for m in members)
        return steps + s.search_queries * cost.map

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
        self.costs = {}
        x, y = inputs[attacked], target[attacked]
        for explainer, attacks in self._by_explainer():
            name, clean = explainer_name(explainer), None
            for attack in attacks:
                result = self.attack(model, x, y, explainer, attack)
                self.advance(self._attack_work(attack, explainer))
                for measure, value in _values(result, attacked, _measures(attack)).items():
                    out.values[attack_key(name, attack, measure)] = value
                if self.masks is not None:
                    maps = None if result is None else result.attacked_map
                    for measure, value in self._localise(maps, attacked).items():
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
            if self.masks is not None:
                for measure, value in self._localise(clean, attacked).items():
                    out.values[part_key(LOCALISATION, name, measure)] = value
        out.notes[COST] = self.costs
        return out

    def _localise(self, maps: Tensor | None, attacked: Tensor) -> dict[str, Tensor]:
        """The ground-truth localisation of the attacked images' maps (NaN elsewhere)."""
        assert self.masks is not None
        return localisation_scores(maps, self.masks[attacked.to(self.masks.device)], attacked)

    def _map_value(
        self, measure: str, model: nn.Module, x: Tensor, y: Tensor, maps: Tensor
    ) -> Tensor:
        """Per attacked image: 1.0 where its clean map is constant ("blank_map"), or the
        fidelity estimate of its clean map ("fidelity")."""
        flat = maps.flatten(1)
        if measure == "blank_map":
            return (flat.amax(1) == flat.amin(1)).float()
        if measure in ("random_topk", "random_lens"):
            level = random_map_level(maps, self.settings.measure_k, measure, self.settings.seed)
            return level.masked_fill(flat.amax(1) == flat.amin(1), float("nan"))
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
        s, name = self.settings, f"{explainer_name(explainer)}/{attack}"
        if s.ensemble and get_objective(attack).needs_gradient:
            ensemble = ensemble_attack(
                model, x, y, explainer=bind_settings(explainer, s), objective=attack,
                target_region=region, seed=s.seed, betas=s.ensemble_betas,
                search_queries=s.search_queries, options=s.attack, progress=self.progress,
            )  # fmt: skip
            self.costs[name] = ensemble.cost()
            return ensemble.result
        start = time.perf_counter()
        result = fragility_attack(
            model,
            x,
            y,
            explainer=bind_settings(explainer, s),
            objective=attack,
            target_region=region,
            seed=s.seed,
            progress=self.progress,
            options=s.attack,
        )
        self.costs[name] = single_attack_cost(result, time.perf_counter() - start)
        return result


def _measures(attack: str) -> tuple[str, ...]:
    """What an attack reports: its objective's `report_metrics` (and the clean map's mass in the
    region, beside an attack that pulls it there), `n_unmeasured`, `improved`."""
    objective = get_objective(attack)
    region = ("clean_region_mass",) if objective.needs_region else ()
    return (*objective.report_metrics, *region, "n_unmeasured", "improved")


def _map_measures(explainer: object) -> tuple[str, ...]:
    """What the part reports of an attacked explainer's clean maps: the blank share, and the
    fidelity of a layer explainer's maps."""
    chance = ("random_topk", "random_lens")
    if explainer_spec(explainer).layer:
        return ("blank_map", *chance, "fidelity")
    return ("blank_map", *chance)


def random_map_level(maps: Tensor, k: int, measure: str, seed: int) -> Tensor:
    """Per map (B, H, W): the mean top-k ("random_topk") or LENS ("random_lens") intersection
    at `k` of the map with `CHANCE_DRAWS` uniformly random maps (seeded).

    Examples:
        >>> maps = torch.rand(2, 8, 8)
        >>> level = random_map_level(maps, 8, "random_topk", 0)
        >>> bool(((level - 8 / 64).abs() < 0.1).all())  # k / (H W) in expectation
        True
    """
    generator = torch.Generator().manual_seed(seed)
    total = torch.zeros(maps.shape[0], dtype=torch.float32)
    for _ in range(CHANCE_DRAWS):
        noise = torch.rand(maps.shape, generator=generator).to(maps)
        if measure == "random_topk":
            value = topk_intersection(maps, noise, k)
        else:
            value = lens_topk_intersection(maps, noise, k, window=LENS_WINDOW)
        total += value.float().cpu()
    return (total / CHANCE_DRAWS).to(maps.device)


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
