"""Speed, memory and robustness benchmarks of robust_train, side by side with peers.

A package so that its scripts import each other by name (`from benchmarks import bench_utils`)
without editing `sys.path`: run each from the repository root as a module, e.g.
`python -m benchmarks.bench_train_step --quick` (benchmarks/README.md lists them). Not part of the
installed package (pyproject.toml packages `robust_train*` only).
"""
