"""Shared pieces of the benchmarks: flags, interleaved timing, peak memory, the record of a run.

Timing: every variant of a benchmark runs in the same process, interleaved round by round
(A B C, then C B A, ...), so a background load slows all of them alike; each variant's time is
the median over rounds and each ratio is the median of the per-round ratios to the reference.
On the CPU the ratios use the process CPU time (time.process_time), which does not count the
time other processes held the cores; wall times are reported beside it.

Peak memory: on CUDA, `torch.cuda.max_memory_allocated` minus the memory allocated before the
call. On CPU, the call runs once under `torch.profiler` with `profile_memory=True`; every
allocation and free of the PyTorch CPU allocator is a "[memory]" event with a signed size, and
the peak is the largest running sum of those sizes in time order: the most bytes of tensors
alive at once during the call beyond what was alive before it (parameters and optimizer state
that already exist are not counted; gradients, activations and saved tensors are). Memory that
libraries allocate outside the PyTorch allocator (oneDNN scratch space) is not seen.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from benchmarks import pages

RESULTS = pages.PAGE


def base_parser(description: str) -> argparse.ArgumentParser:
    """Flags every benchmark has: --quick, --threads, --repeats, --device, --results, --no-write,
    --json."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round: a smoke run")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved rounds per variant")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="the results page a run's record is stored beside, in results/ (default: "
        "benchmarks/RESULTS.md for a full run; a --quick run stores nothing without it)",
    )
    parser.add_argument("--no-write", action="store_true", help="print only, store nothing")
    parser.add_argument(
        "--json", type=Path, default=None, help="also write the record as JSON to this file"
    )
    return parser


def setup_torch(args: argparse.Namespace) -> torch.device:
    """Apply --threads and check --device."""
    torch.set_num_threads(max(1, args.threads))
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    return device


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Timing:
    """Seconds per call of one variant in every round: wall clock and process CPU time.

    `seconds` is the clock the ratios use: process CPU time on the CPU (time the process was
    descheduled by other processes' load is not counted; with one thread it is the compute
    time), wall time on CUDA (the host mostly waits on the device).
    """

    wall: list[float]
    cpu: list[float]
    use_cpu: bool
    ratios: list[float] = field(default_factory=list)

    @property
    def seconds(self) -> list[float]:
        return self.cpu if self.use_cpu else self.wall

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def median_wall(self) -> float:
        return statistics.median(self.wall)

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    def spread(self) -> str:
        """Smallest and largest per-round ratio, e.g. "2.91-3.10"."""
        return f"{min(self.ratios):.2f}-{max(self.ratios):.2f}"


def clock_name(device: torch.device) -> str:
    return "process CPU time" if device.type == "cpu" else "wall time"


def pair_ratio(timings: dict[str, Timing], a: str, b: str) -> tuple[float, str]:
    """Median over rounds of time(a) / time(b), and its range over rounds."""
    ratios = [x / y for x, y in zip(timings[a].seconds, timings[b].seconds, strict=True)]
    return statistics.median(ratios), f"{min(ratios):.2f}-{max(ratios):.2f}"


def time_interleaved(
    variants: dict[str, Callable[[], object]],
    reference: str,
    *,
    rounds: int,
    device: torch.device,
    min_sample_seconds: float = 0.2,
    warmup: bool = True,
) -> dict[str, Timing]:
    """Time each variant in `rounds` interleaved rounds; order alternates A B C / C B A.

    A first (warm-up) call of each variant sets how many calls one sample averages over, so that
    a sample lasts about `min_sample_seconds` (fast calls are not timer noise).
    """
    calls = {}
    for name, fn in variants.items():
        elapsed = _timed(fn, 1, device)[0] if warmup else min_sample_seconds
        calls[name] = max(1, math.ceil(min_sample_seconds / max(elapsed, 1e-6)))
    timings = {name: Timing([], [], device.type == "cpu") for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            wall, cpu = _timed(variants[name], calls[name], device)
            timings[name].wall.append(wall / calls[name])
            timings[name].cpu.append(cpu / calls[name])
    ref = timings[reference].seconds
    for t in timings.values():
        t.ratios = [a / b for a, b in zip(t.seconds, ref, strict=True)]
    return timings


def _timed(fn: Callable[[], object], n: int, device: torch.device) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of n calls."""
    synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        fn()
    synchronize(device)
    return time.perf_counter() - wall, time.process_time() - cpu


def peak_memory(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes of tensors allocated by `fn()` beyond those alive before it (see module doc)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    running = peak = 0
    for event in events:
        running += event.nbytes()
        peak = max(peak, running)
    return int(peak)


def machine(args: argparse.Namespace, device: torch.device) -> str:
    """CPU model, cores, torch version, threads, device, load average."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    text = (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} thread(s), device {device}"
    )
    if device.type == "cuda":
        text += f" ({torch.cuda.get_device_name(device)})"
    return text


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table; floats are written with 3 significant digits."""

    def cell(value: object) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(value: float, limit: float, tolerance: float = 0.0) -> str:
    """ "met", "met within noise" (above the limit by at most `tolerance`, relative) or "MISSED"."""
    if value <= limit:
        return f"met ({value:.2f} <= {limit:g})"
    if value <= limit * (1 + tolerance):
        return f"met within the {tolerance:.0%} noise ({value:.2f} vs {limit:g})"
    return f"MISSED ({value:.2f} > {limit:g})"


class Record:
    """What one run prints and stores: title, command, machine, load, sections.

    `finish` writes the record as JSON to --json, and, for a full run, stores it as its
    benchmark's record beside the --results page and rewrites that page (`benchmarks.pages`).
    A --quick run stores nothing unless --results names a page, and never the committed one.
    """

    def __init__(
        self, title: str, args: argparse.Namespace, device: torch.device, argv: Sequence[str] | None
    ) -> None:
        self.args = args
        script = Path(sys.argv[0]).stem if argv is None else title
        words = list(sys.argv[1:] if argv is None else argv)
        self.command = "python -m benchmarks run " + " ".join([script, *map(shlex.quote, words)])
        self.title = title
        self.start = datetime.datetime.now(datetime.timezone.utc)
        self.load_start = load_average()
        self.machine = machine(args, device)
        self.device = device.type
        self.sections: list[str] = []
        print(f"{title}: {self.machine}; load average {self.load_start}\n", flush=True)

    def add(self, text: str) -> None:
        """Add a section (a table, a list of targets); it is printed at once."""
        print(text + "\n", flush=True)
        self.sections.append(text)

    def finish(self) -> str:
        """The whole record as markdown; written as described in the class docstring unless
        --no-write."""
        elapsed = (datetime.datetime.now(datetime.timezone.utc) - self.start).total_seconds()
        data = self.as_dict(elapsed)
        if not self.args.no_write:
            if getattr(self.args, "json", None):
                self.write_json(self.args.json, data)
            page = results_page(self.args)
            if page is not None:
                print(f"stored {pages.save_record(data, page)}; rewrote {page}", flush=True)
        return pages.render_record(data)

    def as_dict(self, seconds: float) -> dict[str, object]:
        """The record as data: title, command, machine, start, load, seconds, its sections."""
        return {
            "title": self.title,
            "quick": bool(self.args.quick),
            "command": self.command,
            "machine": self.machine,
            "device": self.device,
            "started": self.start.isoformat(timespec="seconds"),
            "load_average": {"start": self.load_start, "end": load_average()},
            "seconds": round(seconds, 1),
            "sections": list(self.sections),
        }

    def write_json(self, path: Path, data: dict[str, object]) -> None:
        """Write `data` (the record as `as_dict` gives it) to `path`, its folder made when
        missing."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def results_page(args: argparse.Namespace) -> Path | None:
    """The page a run stores its record beside: --results, else the committed page for a full
    run; None for a --quick run without --results or one that names the committed page."""
    page = args.results
    if args.quick and (page is None or Path(page).resolve() == pages.PAGE):
        print("--quick: the committed results are left as they are", flush=True)
        return None
    return pages.PAGE if page is None else Path(page)


def record_models(title: str, args: argparse.Namespace, device: torch.device, argv, run) -> str:
    """Run `run(key, args, device, record)` for each of `args.models` (each returns its target
    verdicts) into one `Record` titled `title`, add the verdicts, and finish the record."""
    record = Record(title, args, device, argv)
    verdicts: list[str] = []
    for key in args.models:
        verdicts += run(key, args, device, record)
    record.add("Targets:\n\n" + "\n".join(verdicts))
    return record.finish()
