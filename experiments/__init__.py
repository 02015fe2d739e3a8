"""The studies of robust_train: leaderboard, every-map, architectures, measurements, sweeps.

One runner over a registry (`experiments.registry.EXPERIMENTS`): `python -m experiments list`,
`python -m experiments run NAME [flags]` (the flags go to the study's own parser) and
`python -m experiments page NAME`, which writes the study's page from its results
(experiments/results/) and its hand-written prose (experiments/prose/). experiments/README.md
lists them. Not part of the installed package.
"""
