"""The randomized-smoothing certificate of the saliency map on the shipped MNIST-5k models.

`main` runs `robust-train certify` (through the console script's entry point, in this process)
on the shipped MNIST-5k checkpoints named by `--models`, on the first `--n-images` test images
they all classify correctly, and adds its summary (certified top-k overlap against the L2
radius, beside the attack and random points of each radius, and the radius that certifies half
of the top-k set) as a section to experiments/CERTIFY.md, through its prose and results files
(`experiments.pages.store_page`). `--no-write` leaves the page alone; `--quick` is a smoke run
(2 images, 40 noise samples, a 2-step attack) that never writes the page.

    python -m experiments run certify_curves [--models baseline robust] [--n-images 20]
        [--noise-samples 2000] [--out runs/experiments/certify_curves] [--quick] [--no-write]

The command's own flags (`--sigma`, `--k`, `--radii`, ...) pass through after `--`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path

PAGE = "CERTIFY.md"
READING = "## How to read it"  # the command's legend: the page's prose says it once


def certify_argv(args: argparse.Namespace, out: Path) -> list[str]:
    """The `robust-train certify` command line of a run (without the program name)."""
    ckpts = [f"mnist5k_{name}" for name in args.models]  # shipped names: the command finds them
    quick = ["--attack-steps", "2", "--attack-samples", "2", "--random-points", "1"]
    return [
        "certify", "--ckpt", *ckpts, "--names", *args.models,
        "--n-images", str(args.n_images), "--noise-samples", str(args.noise_samples),
        "--threads", "1", "--no-progress", "--out", str(out),
        *(quick if args.quick else []), *args.extra,
    ]  # fmt: skip


def section(summary: str, argv: Sequence[str], seconds: float) -> str:
    """The page's section of one run: a dated heading, the command and the machine, then the
    command's summary without its title and its legend."""
    body = summary.split(READING)[0].strip("\n")
    body = "\n".join(body.splitlines()[1:]).strip("\n") if body.startswith("# ") else body
    machine = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, 1 torch thread; "
        f"run took {seconds:.0f} s wall"
    )
    return (
        f"## robust-train certify on the shipped MNIST-5k models — "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC\n\n"
        f"- command: `robust-train {' '.join(argv)}`\n- machine: {machine}\n\n{body}\n"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments run certify_curves", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--models", nargs="+", default=["baseline", "robust"],
                        help="shipped MNIST-5k models, mnist5k_NAME (baseline robust)")  # fmt: skip
    parser.add_argument("--n-images", type=int, default=None, help="test images (20)")
    parser.add_argument("--noise-samples", type=int, default=None, help="per image (2000)")
    parser.add_argument("--out", type=Path, default=Path("runs/experiments/certify_curves"))
    parser.add_argument("--quick", action="store_true", help="smoke run; the page is kept")
    parser.add_argument("--no-write", action="store_true", help="leave the page alone")
    parser.add_argument("extra", nargs="*", help="after --: more flags of robust-train certify")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the certificate on the shipped models and add its section to the page.

    Returns:
        The exit code of `robust-train certify` (2 for a user error, named on one line).
    """
    from experiments.pages import page_text, store_page
    from robust_train.app.cli import main as robust_train

    args = _parser().parse_args(argv)
    args.n_images = args.n_images or (2 if args.quick else 20)
    args.noise_samples = args.noise_samples or (40 if args.quick else 2000)
    command = certify_argv(args, args.out)
    start = time.perf_counter()
    code = robust_train(command)
    if code != 0:
        return code
    text = section((args.out / "summary.md").read_text(), command, time.perf_counter() - start)
    print(text)
    if not (args.quick or args.no_write):
        store_page(PAGE, page_text(PAGE) + "\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
