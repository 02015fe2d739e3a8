"""Lightning callbacks that measure how robust the explanations are while a model trains.

- `FragilityMonitor`: fragility attacks on the explanation (Ghorbani et al. 2019),
  `robustness/<attack>/{topk_intersection,spearman,kendall,center_shift}`.
- `LipschitzMonitor`: local Lipschitz estimate (Alvarez-Melis & Jaakkola 2018),
  `robustness/lipschitz/<explainer>`.
- `FidelityMonitor`: MIF/LIF curves and fidelity (Brocki & Chung 2022),
  `fidelity/<explainer>/{mif_auc,lif_auc,estimate}`.
- `RobustnessMonitor`: any of the three on one subset and schedule.

Each logs its cost as `robustness/seconds/<monitor>` (`robustness/seconds/total` for
`RobustnessMonitor`, with one key per part), through `LightningModule.log`, so every Lightning
logger receives the scalars; figures go to W&B (images, line charts) or to PNG files. A model
with NaN/inf weights, or an evaluation that meets NaN/inf maps or scores (a diverged fit), never
stops training: the monitor logs `robustness/nonfinite` (how many such values; 0 otherwise) and
no robustness number for what it could not measure, and warns once.
"""

from robust_train.callbacks._base import DEFAULT_N_SAMPLES, RobustnessCallback
from robust_train.callbacks.certified import CertifiedMonitor
from robust_train.callbacks.fidelity import FidelityMonitor
from robust_train.callbacks.fragility import FragilityMonitor
from robust_train.callbacks.lipschitz import LipschitzMonitor
from robust_train.callbacks.robustness import RobustnessMonitor

__all__ = [
    "CertifiedMonitor",
    "DEFAULT_N_SAMPLES",
    "FidelityMonitor",
    "FragilityMonitor",
    "LipschitzMonitor",
    "RobustnessCallback",
    "RobustnessMonitor",
]
