"""LocalisationMonitor: do the maps still point at the object under attack, while training?"""

from __future__ import annotations

from typing import Any

from robust_train.callbacks.robustness import RobustnessMonitor, _monitor_options

__all__ = ["LocalisationMonitor"]


@_monitor_options
class LocalisationMonitor(RobustnessMonitor):
    """The fragility attacks of held-out images, with their maps scored against the ground truth.

    `RobustnessMonitor` with the fragility part and `localisation=True`: at each scheduled
    evaluation it attacks the explanations of the held-out subset's correctly classified images
    (Ghorbani et al. 2019) and logs, besides the fragility measures, the relevance mass accuracy
    and relevance rank accuracy (Arras et al. 2022) and the pointing game (Zhang et al. 2018)
    of the clean maps (`robustness/localisation/<explainer>/<measure>`) and of the attacked maps
    (`robustness/attack/<explainer>/<attack>/<measure>`), against the masks of the evidence that
    the datamodule gives (`masks(split)`, as `robust_train.data.ClutteredMNIST5kDataModule`).

    Args:
        **options: the evaluation settings and the callback's schedule, subset and logging
            options, as for `RobustnessMonitor` (its cheap monitor defaults).

    Raises:
        ValueError: when the fit starts, a datamodule without `masks(split)`.

    Examples:
        >>> monitor = LocalisationMonitor(explainers=("saliency", "grad_cam"), n_samples=8)
        >>> [p.name for p in monitor.parts], monitor.localisation
        (['fragility'], True)
    """

    name = "localisation"

    def __init__(self, **options: Any) -> None:
        for fixed in ("parts", "localisation"):
            if fixed in options:
                raise TypeError(f"LocalisationMonitor sets `{fixed}` itself; got {fixed}=...")
        RobustnessMonitor.__init__(self, parts=("fragility",), localisation=True, **options)
