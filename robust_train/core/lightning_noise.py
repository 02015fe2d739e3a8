"""Silence the lines every Lightning run prints that say nothing about this run.

- LightningCLI's "args parameter is intended to run from within Python" warning: the console
  script passes its arguments on purpose.
- Lightning's "Tip: ... try installing litlogger" info line (an advertisement).
- Lightning's own deprecation warning about torch's `LeafSpec` (Lightning calls it, not the user).
- "Checkpoint directory ... exists and is not empty": each fit has a run folder of its own, and a
  resumed fit continues in its folder on purpose.
- jsonargparse's "Dump of a value that does not round-trip" (a tuple default of a `**kwargs`
  option written to config.yaml as a list): every option that takes a sequence reads a list back.
"""

from __future__ import annotations

import logging
import warnings

_NOISE = ("litlogger",)


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(word in message for word in _NOISE)


_FILTER = _DropNoise()


def quiet_lightning() -> None:
    """Install the filters (idempotent).

    Examples:
        >>> quiet_lightning(); quiet_lightning()
        >>> sum(isinstance(f, _DropNoise) for f in logging.getLogger("pytorch_lightning").filters)
        1
    """
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    warnings.filterwarnings("ignore", message=r"\s*Dump of a value that does not round-trip")
    for name in (
        "pytorch_lightning",
        "pytorch_lightning.utilities.rank_zero",
        "lightning.pytorch",
        "lightning.pytorch.utilities.rank_zero",
    ):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
