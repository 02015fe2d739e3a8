"""Cost of a certified explanation per image, against the number of noise samples n and the image
size, and how the certificate tightens with n (beside its plug-in limit).

(a) The shipped MNIST-5k pair (checkpoints/mnist5k_{baseline,robust}.ckpt, 28x28, smoothed
    saliency, sigma 0.25, k = kappa = 98, alpha 0.05) on the first `--images` test images both
    classify correctly: seconds per certified image and the mean certified top-k overlap at
    r = sigma, 1.5 sigma for each n of `--ns`. The last column of the plug-in row puts the Monte
    Carlo frequencies of the largest n in place of both confidence bounds: what the Lipschitz
    argument alone would give with infinitely many samples (NOT a certificate), so the distance
    between it and a row is the price of the statistics and the rest the price of the geometry.
(b) Untrained models (the weights do not change the cost) at 8x8, 28x28, 32x32 and 64x64, n fixed:
    seconds per image and per 1000 noisy copies, so the scaling with the image size is read off.

Times are process CPU seconds (one thread by default; the wall time on the shared machine is
printed beside it), one call each after a warm-up; certification is a fixed amount of work per
sample (one explainer call on a noisy copy, one top-kappa), so one call is representative.

    python -m benchmarks.bench_certify [--quick] [--images 4] [--ns 100 300 1000 3000] [--no-write]
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from benchmarks import bench_utils as bu
from robust_train.app.checkpoint_io import heldout_tensors, load_checkpoint
from robust_train.certify import certify_explanations, overlap_radii, reference_set
from robust_train.core.resources import shipped_checkpoint
from robust_train.models import MNISTConvNet, SmallCNN

ROOT = Path(__file__).resolve().parents[1]
SIGMA = 0.25
RADII = (SIGMA, 1.5 * SIGMA)


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def shipped_pair(n_images: int) -> tuple[dict[str, nn.Module], torch.Tensor, torch.Tensor]:
    models, config = {}, None
    for name in ("baseline", "robust", "certified"):
        models[name], config = load_checkpoint(shipped_checkpoint(f"mnist5k_{name}"))
    assert config is not None
    x, y, _ = heldout_tensors(config, 4 * n_images + 16)
    ok = torch.ones(len(y), dtype=torch.bool)
    for model in models.values():
        with torch.no_grad():
            ok &= model(x).argmax(1) == y
    return models, x[ok][:n_images], y[ok][:n_images]


def plug_in(cert) -> list[float]:
    """Mean overlap at RADII with the frequencies as both bounds (clipped to [0.5/n, 1 - 0.5/n])."""
    half = 0.5 / cert.n_samples
    p = cert.probability.clamp(half, 1 - half)
    radii = overlap_radii(p, p, reference_set(p, cert.k), cert.sigma)
    return [float((radii > r).sum(1).double().mean() / cert.k) for r in RADII]


def part_n(args, record: bu.Record) -> None:
    models, x, y = shipped_pair(args.images)
    rows = []
    for name, model in models.items():
        certify_explanations(model, x[:1], y[:1], sigma=SIGMA, n_samples=10, seed=0)  # warm-up
        cert = None
        for n in args.ns:
            cert, cpu, wall = _timed(
                lambda n=n, m=model: certify_explanations(
                    m, x, y, sigma=SIGMA, n_samples=n, seed=0, radii=RADII
                )
            )
            means = cert.certified_overlap.mean(0).tolist()
            rows.append([name, n, cpu / len(x), wall / len(x), 1000 * cpu / (n * len(x)), *means])
        assert cert is not None
        rows.append([name, "plug-in limit", "-", "-", "-", *plug_in(cert)])
    header = ["model", "n", "CPU s / image", "wall s / image", "CPU ms / sample"]
    header += [f"certified overlap r={r:g}" for r in RADII]
    record.add(
        f"(a) MNIST-5k shipped models, 28x28, {len(x)} test images, smoothed saliency, "
        f"sigma {SIGMA}, k = kappa = 98, alpha 0.05\n\n" + bu.table(header, rows)
    )


def part_size(args, record: bu.Record) -> None:
    torch.manual_seed(0)
    settings = [
        ("SmallCNN 8x8", SmallCNN(input_size=8), 8),
        ("MNISTConvNet(16, 32, 128) 28x28", MNISTConvNet(channels=(16, 32), hidden=128), 28),
        ("SmallCNN 32x32", SmallCNN(input_size=32), 32),
        ("SmallCNN 64x64", SmallCNN(input_size=64), 64),
    ]
    n, rows, first = args.size_n, [], None
    for label, model, size in settings:
        model.eval()
        x = torch.rand(args.images, 1, size, size, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            y = model(x).argmax(1)
        certify_explanations(model, x[:1], y[:1], sigma=SIGMA, n_samples=10, seed=0)  # warm-up
        _, cpu, wall = _timed(
            lambda m=model, x=x, y=y: certify_explanations(
                m, x, y, sigma=SIGMA, n_samples=n, seed=0
            )
        )
        per = cpu / (args.images * n) * 1000
        first = first or (size * size, per)
        rows.append(
            [label, size * size, cpu / args.images, wall / args.images, per, per / first[1]]
        )
    header = ["model", "pixels", "CPU s / image", "wall s / image", "CPU ms / sample", "x 8x8"]
    record.add(f"(b) image size, n = {n}, {args.images} images\n\n" + bu.table(header, rows))


def main(argv: Sequence[str] | None = None) -> str:
    parser = bu.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=None, help="images per model (4)")
    parser.add_argument("--ns", type=int, nargs="+", default=None, help="(100 300 1000 3000)")
    parser.add_argument("--size-n", type=int, default=None, help="n of part (b) (300)")
    args = parser.parse_args(argv)
    device = bu.setup_torch(args)
    args.images = args.images or (2 if args.quick else 4)
    args.ns = args.ns or ([20, 60] if args.quick else [100, 300, 1000, 3000])
    args.size_n = args.size_n or (20 if args.quick else 300)
    record = bu.Record("bench_certify", args, device, argv)
    part_n(args, record)
    part_size(args, record)
    record.add("Targets: none (report only).")
    return record.finish()


if __name__ == "__main__":
    main()
