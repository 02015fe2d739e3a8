"""robust_train: train image classifiers whose explanations are robust, and measure it while they train."""

from robust_train.module import RobustClassifier

__version__ = "0.1.0"

__all__ = ["RobustClassifier", "__version__"]
