"""Lightning callbacks that measure how robust the explanations are while a model trains.

`RobustnessMonitor` runs the evaluation engine's parts (`robust_train.evaluation.PARTS`: the
fragility attacks of Ghorbani et al. 2019, the local Lipschitz estimate of Alvarez-Melis &
Jaakkola 2018, MIF/LIF fidelity of Brocki & Chung 2022, and any part registered since) on a
held-out subset, and logs every key of `robust-train evaluate`'s results under `robustness/`
(`robustness/attack/saliency/topk/topk_intersection`, `robustness/lipschitz/saliency/lipschitz`,
`robustness/fidelity/saliency/fidelity`, ...). `FragilityMonitor`, `LipschitzMonitor` and
`FidelityMonitor` are it with one part. Two monitors that would log one key are refused when
the fit starts; every setting is checked against the data's image size then too.

Each logs its cost as `robustness/seconds/<monitor>` (`robustness/seconds/total`, with one key per
part, when several parts run), through `LightningModule.log`, so every Lightning logger receives
the scalars; figures go to W&B (images, line charts) or to PNG files. A model with NaN/inf
weights, or an evaluation that meets NaN/inf maps or scores (a diverged fit), never stops
training: the monitor logs `robustness/nonfinite` (how many such values; 0 otherwise) and no
robustness number for what it could not measure, and warns once.

Where the datamodule has ground-truth masks of the evidence (`masks(split)`), the fragility
part's clean and attacked maps are also scored against them (relevance mass, relevance rank,
pointing game); `LocalisationMonitor` is the fragility part with that scoring required.

`BatchNormRecalibration` measures nothing: it re-estimates the BatchNorm running statistics from
training batches during a fit, so an eval-mode penalty, validation and checkpoints see statistics
of the current weights (`recalibrate_batchnorm` is the same as a function).
"""

from robust_train.callbacks._base import DEFAULT_N_SAMPLES, RobustnessCallback
from robust_train.callbacks.batchnorm import BatchNormRecalibration, recalibrate_batchnorm
from robust_train.callbacks.certified import CertifiedMonitor
from robust_train.callbacks.fidelity import FidelityMonitor
from robust_train.callbacks.fragility import FragilityMonitor
from robust_train.callbacks.lipschitz import LipschitzMonitor
from robust_train.callbacks.localisation import LocalisationMonitor
from robust_train.callbacks.robustness import RobustnessMonitor

__all__ = [
    "BatchNormRecalibration",
    "CertifiedMonitor",
    "DEFAULT_N_SAMPLES",
    "FidelityMonitor",
    "FragilityMonitor",
    "LipschitzMonitor",
    "LocalisationMonitor",
    "RobustnessCallback",
    "RobustnessMonitor",
    "recalibrate_batchnorm",
]
