"""`SoftSmoothedExplainer`: a differentiable, fixed-noise stand-in of the smoothed sparsified
explainer, which the attack on the certificate ascends (`robust_train.certify.attack`).

For fixed (seeded) noise draws delta_1..delta_S it is the mean over s of
sigmoid((m_s - t_s) / (temperature * std(m_s))), m_s the explainer's importance map of x + delta_s
and t_s the midpoint between its kappa-th and (kappa+1)-th largest values: SmoothGrad-style
averaging (Smilkov et al. 2017) of a soft top-kappa indicator. With the noise fixed it is a
deterministic function of each image, so the attack's iterates are compared fairly.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from robust_train.core.validation import check_positive
from robust_train.explain.maps import importance_map
from robust_train.explain.protocol import Explainer

__all__ = ["SoftSmoothedExplainer"]


class SoftSmoothedExplainer(Explainer):
    """Differentiable fixed-noise stand-in of the smoothed sparsified explainer (module docstring).

    An `Explainer` (it implements the protocol, which it inherits): a call takes
    `(model, inputs, target, *, create_graph=False, **options)` and passes `create_graph` and
    the options on to the wrapped explainer.

    Examples:
        >>> from robust_train.explain import saliency
        >>> soft = SoftSmoothedExplainer(saliency, sigma=0.1, n_samples=4, kappa=3)
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
        >>> m = soft(net, torch.rand(2, 1, 4, 4), torch.tensor([0, 1]))
        >>> m.shape, bool(((m >= 0) & (m <= 1)).all())
        (torch.Size([2, 1, 4, 4]), True)
    """

    def __init__(
        self,
        explain: Explainer,
        *,
        sigma: float,
        n_samples: int = 16,
        kappa: int,
        temperature: float = 0.3,
        seed: int = 0,
    ) -> None:
        check_positive(n_samples, "attack_samples", integer=True)
        check_positive(temperature, "temperature")
        self.explain, self.sigma, self.n_samples = explain, sigma, n_samples
        self.kappa, self.temperature, self.seed = kappa, temperature, seed
        self.__name__ = f"soft_smoothed_{getattr(explain, '__name__', 'explainer')}"

    def __call__(self, model: nn.Module, inputs: Tensor, target: Tensor, **options: Any) -> Tensor:
        """The soft smoothed map (B, 1, H, W) in [0, 1]; `options` (`create_graph` among them)
        go to the explainer."""
        options.setdefault("create_graph", False)  # the protocol's default, stated to the explainer
        batch, s = inputs.shape[0], self.n_samples
        gen = torch.Generator().manual_seed(self.seed)
        noise = torch.randn((s, *inputs.shape[1:]), generator=gen, dtype=inputs.dtype)
        noisy = inputs.unsqueeze(1) + self.sigma * noise.to(inputs.device).unsqueeze(0)
        explanation = self.explain(
            model,
            noisy.reshape(batch * s, *inputs.shape[1:]),
            target.repeat_interleave(s),
            **options,
        )
        maps = importance_map(explanation)
        flat = maps.flatten(1)
        kappa = min(self.kappa, flat.shape[1] - 1)
        top = flat.detach().topk(kappa + 1, dim=1).values
        threshold = (top[:, kappa - 1] + top[:, kappa]).unsqueeze(1) / 2
        scale = self.temperature * flat.detach().std(1, keepdim=True).clamp_min(1e-12)
        soft = torch.sigmoid((flat - threshold) / scale)
        return soft.view(batch, s, 1, *maps.shape[1:]).mean(1)
