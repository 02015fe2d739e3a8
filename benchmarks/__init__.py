"""Speed and memory benchmarks of robust_train, side by side with its peers and bare loops.

One runner over a registry (`benchmarks.registry.BENCHMARKS`): `python -m benchmarks list`,
`python -m benchmarks run NAME [--quick] [flags]`, which writes the record as JSON to
runs/benchmarks/NAME.json and appends it to benchmarks/RESULTS.md (benchmarks/README.md). The
studies (leaderboard, every-map, architectures, ...) are the experiments package. Not part of the
installed package (pyproject.toml packages `robust_train*` only).
"""
