"""FidelityMonitor: MIF/LIF fidelity of explainers, logged while the model trains."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor, nn

from robust_train._validation import check_choice, check_positive
from robust_train.callbacks._base import RobustnessCallback
from robust_train.callbacks._checks import check_names, compute_quietly, explainer_name
from robust_train.callbacks._figures import Curves, Report
from robust_train.metrics.fidelity import Fidelity
from robust_train.metrics.functional.fidelity import PERTURBATIONS

DEFAULT_FIDELITY_STEPS = 10


class FidelityMonitor(RobustnessCallback):
    """MIF and LIF perturbation curves of each explainer on held-out images (Brocki & Chung 2022).

    Pixels are removed in order of importance, most important first (MIF: the score of the
    predicted class should fall fast) and least important first (LIF: it should stay high);
    the fidelity estimate AUC_LIF - AUC_MIF separates faithfulness from perturbation artifacts.
    Logs `fidelity/<explainer>/mif_auc`, `fidelity/<explainer>/lif_auc`,
    `fidelity/<explainer>/estimate` (higher is more faithful) and `robustness/seconds/fidelity`,
    through the `Fidelity` metric (reduced correctly across DDP ranks). With figures on, the
    mean curves go to W&B as a line chart `fidelity/<explainer>/curves`, or to a PNG file for
    other loggers.

    Args:
        explainers: explainer names (or callables) to score.
        fidelity_steps: removal steps (the curves have fidelity_steps + 1 points, 0% to 100%);
            10 by default (Brocki & Chung used 20: twice the cost for a similar area).
        perturbation: fill of removed pixels: "mean", "zero", "blur", "noise" or "imputation".
        **kwargs: schedule, subset and logging options of `RobustnessCallback`.

    Example:
        >>> monitor = FidelityMonitor(["saliency"], fidelity_steps=10, every_n_epochs=5)
        >>> monitor.explainers, monitor.fidelity_steps
        (('saliency',), 10)
    """

    name = "fidelity"

    def __init__(
        self,
        explainers: Sequence[str | Callable[..., Any]] = ("saliency",),
        *,
        fidelity_steps: int = DEFAULT_FIDELITY_STEPS,
        perturbation: str = "mean",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.explainers = check_names(explainers, "explainers")
        check_positive(fidelity_steps, "fidelity_steps", integer=True)
        check_choice(perturbation, "perturbation", PERTURBATIONS)
        self.fidelity_steps, self.perturbation = fidelity_steps, perturbation

    def evaluate(
        self, model: nn.Module, inputs: Tensor, targets: Tensor, predictions: Tensor
    ) -> Report:
        """Curves of this rank's images, explaining their predicted class."""
        report = Report()
        for explainer in self.explainers:
            name = explainer_name(explainer)
            metric = Fidelity(
                self.fidelity_steps,
                explainer=explainer,
                seed=self.seed,
                perturbation=self.perturbation,
                internal_batch_size=self.internal_batch_size,
            ).to(inputs.device)
            if inputs.shape[0]:
                metric.update(model, inputs, predictions)
            values = compute_quietly(metric)
            report.scalars[f"fidelity/{name}/mif_auc"] = float(values["auc_mif"])
            report.scalars[f"fidelity/{name}/lif_auc"] = float(values["auc_lif"])
            report.scalars[f"fidelity/{name}/estimate"] = float(values["fidelity"])
            if self.log_images:
                report.curves[f"fidelity/{name}/curves"] = Curves(
                    title=f"{name}: fidelity {float(values['fidelity']):.3f}",
                    xs=values["fractions"].tolist(),
                    xname="fraction of pixels removed",
                    lines={
                        "MIF": values["mif_curve"].tolist(),
                        "LIF": values["lif_curve"].tolist(),
                    },
                )
        return report
