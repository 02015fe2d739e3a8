"""Speed and memory benchmarks of robust_train, side by side with its peers and bare loops.

One runner over a registry (`benchmarks.registry.BENCHMARKS`): `python -m benchmarks list`,
`python -m benchmarks run NAME [--quick] [flags]`, which writes the record of the run as JSON to
runs/benchmarks/NAME.json; a full run also stores it as the benchmark's record in
benchmarks/results/NAME.json (replacing the one before) and regenerates benchmarks/RESULTS.md
from the records, which `python -m benchmarks page` does alone (`benchmarks.pages`). The studies
(leaderboard, every-map, architectures, ...) are the experiments package. Not part of the
installed package (pyproject.toml packages `robust_train*` only).
"""
