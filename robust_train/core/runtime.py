"""The shared runtime plumbing, defined once: model modes, gradient guard, chunks, generators.

Every explainer, attack, metric, penalty and monitor uses these helpers instead of its own copy:

- `eval_mode(model)`: eval mode for the duration of a block; on exit EVERY submodule gets its
  own train/eval flag back (a frozen BatchNorm inside a training model stays frozen), which
  `model.train(was_training)` does not do.
- `running_statistics_kept(model)`: normalisation layers keep their running statistics through a
  block: its forwards normalise as each layer's mode says but update a copy, dropped on exit.
- `require_grad_mode(caller)`: the clear error for `torch.inference_mode` (Lightning's validation
  and test loops), under which no input gradient can be taken and `torch.enable_grad()` does not
  help.
- `row_chunks(n, size)`: `(start, stop)` ranges; `size` None is one chunk, 0 is refused.
- `auto_chunk(row_shape, ...)`: the default rows per forward of the metrics, the attack and the
  explainers that multiply the batch, from the size of one row and a budget of input elements.
- `make_generator(generator, seed, device)`: the given generator, a fresh one from `seed`, or None.
- `predict(model, inputs, batch_size)`: predicted labels without gradients, in chunks.
- `check_optional_positive(value, name)`: None, or a number > 0.
- `set_threads(models, threads)`: torch's CPU threads, one for small models unless told.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _NormBase

from robust_train.core.validation import check_positive

__all__ = [
    "CHUNK_ELEMENTS",
    "INFERENCE_MODE_ERROR",
    "MIN_CHUNK_ROWS",
    "SMALL_MODEL_PARAMETERS",
    "auto_chunk",
    "check_optional_positive",
    "eval_mode",
    "generator_device",
    "make_generator",
    "modes_restored",
    "predict",
    "require_grad_mode",
    "row_chunks",
    "running_statistics_kept",
    "set_threads",
]

INFERENCE_MODE_ERROR = (
    "`{caller}` needs gradients but was called under torch.inference_mode (Lightning runs the "
    "validation and test loops under it, and torch.enable_grad() does not undo it); call it "
    "from a training hook or use Trainer(inference_mode=False)"
)


@contextmanager
def modes_restored(model: nn.Module) -> Iterator[None]:
    """Restore every submodule's own train/eval flag on exit; change nothing on entry.

    Examples:
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout())
        >>> with modes_restored(net):
        ...     _ = net.eval()
        >>> net.training
        True
    """
    modes = [(module, module.training) for module in model.modules()]
    try:
        yield
    finally:
        for module, mode in modes:
            module.training = mode


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put `model` in eval mode inside the block; restore each submodule's own flag on exit.

    Examples:
        >>> net = torch.nn.Sequential(torch.nn.BatchNorm1d(2), torch.nn.Dropout())
        >>> _ = net[0].eval()  # a frozen BatchNorm inside a training model
        >>> with eval_mode(net):
        ...     net.training, net[1].training
        (False, False)
        >>> net.training, net[0].training, net[1].training
        (True, False, True)
    """
    with modes_restored(model):
        model.eval()
        yield model


def batchnorm_layers(model: nn.Module) -> list[_NormBase]:
    """The normalisation layers of `model` that track running statistics (every
    `torch.nn.modules.batchnorm._NormBase` with `track_running_stats`), in module order.

    Examples:
        >>> norms = [nn.BatchNorm2d(2), nn.BatchNorm2d(2, track_running_stats=False)]
        >>> len(batchnorm_layers(nn.Sequential(*norms))), len(batchnorm_layers(nn.Linear(2, 2)))
        (1, 0)
    """
    return [m for m in model.modules() if isinstance(m, _NormBase) and m.track_running_stats]


@contextmanager
def running_statistics_kept(model: nn.Module) -> Iterator[nn.Module]:
    """Keep the running statistics of `model`'s normalisation layers through the block.

    Inside the block every BatchNorm (`batchnorm_layers`) computes as its mode says: in training
    it normalises with the batch's statistics and updates its running statistics, but those of a
    copy; on exit the layer gets its own tensors back, unchanged (no in-place write to them, so
    graphs that saved them stay valid). Modes and parameters are not touched.

    Examples:
        >>> bn = torch.nn.BatchNorm1d(2).train()
        >>> with running_statistics_kept(bn):
        ...     _ = bn(torch.randn(8, 2) + 5)
        >>> bn.running_mean.tolist(), int(bn.num_batches_tracked)
        ([0.0, 0.0], 0)
    """
    kept: list[tuple[nn.Module, str, Tensor]] = []
    for layer in batchnorm_layers(model):
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            buffer = layer._buffers.get(name)
            if buffer is not None:
                kept.append((layer, name, buffer))
                layer._buffers[name] = buffer.clone()
    try:
        yield model
    finally:
        for module, name, buffer in kept:
            module._buffers[name] = buffer


def require_grad_mode(caller: str) -> None:
    """Raise a RuntimeError naming `caller` when gradients cannot be taken (inference mode).

    Examples:
        >>> require_grad_mode("saliency")  # fine outside inference mode
        >>> with torch.inference_mode():
        ...     require_grad_mode("saliency")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        RuntimeError: `saliency` needs gradients but was called under torch.inference_mode ...
    """
    if torch.is_inference_mode_enabled():
        raise RuntimeError(INFERENCE_MODE_ERROR.format(caller=caller))


def check_optional_positive(value: object, name: str, *, integer: bool = False) -> None:
    """Raise unless `value` is None or a finite number > 0 (an int when `integer`).

    Examples:
        >>> check_optional_positive(None, "k"); check_optional_positive(3, "k", integer=True)
        >>> check_optional_positive(0, "k")
        Traceback (most recent call last):
        ...
        ValueError: `k` must be > 0, got 0
    """
    if value is not None:
        check_positive(value, name, integer=integer)


def row_chunks(n_rows: int, size: int | None) -> Iterator[tuple[int, int]]:
    """Yield `(start, stop)` ranges covering `range(n_rows)` in chunks of at most `size` rows.

    `size` None gives one chunk; a size that is not a positive int raises (it names the value).

    Examples:
        >>> list(row_chunks(5, 2)), list(row_chunks(5, None)), list(row_chunks(0, 4))
        ([(0, 2), (2, 4), (4, 5)], [(0, 5)], [])
    """
    check_optional_positive(size, "internal_batch_size", integer=True)
    step = max(n_rows, 1) if size is None else size
    for start in range(0, n_rows, step):
        yield start, min(start + step, n_rows)


# Input elements per forward: 2**16 is 64 images of 32x32 or 83 of 28x28 on the CPU, where larger
# batches leave the caches; on CUDA, where large batches fill the device, 2**22 (27 RGB images of
# 224x224, ~1 GB of ResNet-18 activations). Rows that keep a graph for double backprop count
# twice. At least MIN_CHUNK_ROWS rows: chunks of one large image run slower per row. The design
# notes say where these sizes come from.
CHUNK_ELEMENTS = {"cpu": 2**16, "cuda": 2**22}
MIN_CHUNK_ROWS = 4


def auto_chunk(
    row_shape: Sequence[int],
    *,
    device: torch.device | str = "cpu",
    create_graph: bool = False,
    budget: int | None = None,
) -> int:
    """Rows per forward for rows of `row_shape` (C, H, W): `budget // elements`, at least
    `MIN_CHUNK_ROWS` (4).

    `budget` defaults to `CHUNK_ELEMENTS` of the device type (the CPU's for an unknown type),
    halved when the rows keep a graph (`create_graph`). Used when `internal_batch_size` is None.

    Examples:
        >>> auto_chunk((1, 28, 28)), auto_chunk((1, 32, 32)), auto_chunk((3, 224, 224))
        (83, 64, 4)
        >>> auto_chunk((1, 28, 28), create_graph=True), auto_chunk((3, 224, 224), device="cuda")
        (41, 27)
    """
    elements = math.prod(int(d) for d in row_shape)
    if elements < 1:
        raise ValueError(f"`row_shape` must have positive sizes, got {tuple(row_shape)!r}")
    if budget is None:
        budget = CHUNK_ELEMENTS.get(torch.device(device).type, CHUNK_ELEMENTS["cpu"])
    else:
        check_positive(budget, "budget", integer=True)
    if create_graph:
        budget //= 2
    return max(MIN_CHUNK_ROWS, budget // elements)


def make_generator(
    generator: torch.Generator | None, seed: int | None, device: torch.device | str
) -> torch.Generator | None:
    """The random generator to draw from: `generator`, a fresh one from `seed`, or None (global).

    A `seed` gives a new generator at every call, so the same call always draws the same numbers
    (the fixed noise that makes a stochastic explainer a deterministic function of its input).

    Examples:
        >>> g = make_generator(None, 3, torch.device("cpu"))
        >>> torch.equal(torch.rand(2, generator=g), torch.rand(2, generator=torch.manual_seed(3)))
        True
    """
    if generator is not None and seed is not None:
        raise ValueError("pass either `generator` or `seed`, not both")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                f"`generator` must be a torch.Generator, got {type(generator).__name__}"
            )
        return generator
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"`seed` must be an int, got {seed!r}")
    return torch.Generator(device=device).manual_seed(seed)


def generator_device(generator: torch.Generator | None, fallback: torch.device) -> torch.device:
    """Device on which random numbers must be drawn for `generator` (`fallback` for None).

    Examples:
        >>> generator_device(None, torch.device("cpu")), generator_device(torch.Generator(), "x")
        (device(type='cpu'), device(type='cpu'))
    """
    return fallback if generator is None else torch.device(generator.device)


def predict(model: nn.Module, inputs: Tensor, batch_size: int | None = None) -> Tensor:
    """Predicted labels (B,) of `model` on `inputs`, without gradients, `batch_size` at a time.

    The model's mode is not changed (wrap the call in `eval_mode` for eval-mode predictions).

    Examples:
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
        >>> predict(net, torch.rand(5, 1, 2, 2), batch_size=2).shape
        torch.Size([5])
    """
    if inputs.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long, device=inputs.device)
    with torch.no_grad():
        labels = [model(inputs[a:b]).argmax(1) for a, b in row_chunks(inputs.shape[0], batch_size)]
    return torch.cat(labels)


SMALL_MODEL_PARAMETERS = 1_000_000


def set_threads(models: nn.Module | Iterable[nn.Module], threads: int | None = None) -> int:
    """Set torch's CPU (intra-op) threads for running `models`: `threads` when given, else one
    thread when every model has fewer than `SMALL_MODEL_PARAMETERS` parameters (the work of a
    small model is too fine to share out), else leave the setting as it is.

    Args:
        models: one model or several.
        threads: the number of threads to use (> 0), or None for the rule above.

    Returns:
        The number of threads torch uses now.

    Raises:
        ValueError: `threads` is not None and not a whole number > 0.

    Examples:
        >>> before = torch.get_num_threads()
        >>> set_threads(nn.Linear(4, 2)), set_threads(nn.Linear(4, 2), threads=2)
        (1, 2)
        >>> _ = torch.set_num_threads(before)
    """
    check_optional_positive(threads, "threads", integer=True)
    if threads is None:
        group = [models] if isinstance(models, nn.Module) else list(models)
        sizes = [sum(p.numel() for p in m.parameters()) for m in group]
        threads = 1 if all(n < SMALL_MODEL_PARAMETERS for n in sizes) else None
    if threads is not None:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()
