"""Paths the tests read: the repository root, its configs, and the tests' own data files."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
DATA = Path(__file__).resolve().parent / "data"
