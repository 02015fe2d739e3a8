"""experiments/every_map.py `table`: the test-split table of EVERY_MAP.md from scored models."""

from __future__ import annotations

import statistics

from experiments import every_map as em


def _summary(base: float) -> dict[str, float]:
    keys = [key for _, key, _, _ in em.seed_rows()]
    return {key: base + 0.001 * i for i, key in enumerate(keys)}


def test_seeds_table_gives_mean_sd_seed_zero_and_whether_each_target_is_met() -> None:
    natural = _summary(0.5)
    seeds = {"s0": _summary(0.6), "s1": _summary(0.7), "s2": _summary(0.8)}
    seeds["s0"]["acc"], seeds["s1"]["acc"], seeds["s2"]["acc"] = 0.491, 0.496, 0.493
    seeds["s2"]["gc/worst"] = 0.1  # drags the Grad-CAM mean below 0.50
    t = em.seeds_table({"natural": natural, **seeds}, "natural", ["s0", "s1", "s2"])
    rows = {r[0]: r for r in t["rows"]}
    assert t["align"].count("---") == len(t["columns"]) == len(t["rows"][0])
    values = [seeds[s]["sal/worst"] for s in seeds]
    sal = rows["saliency: top-k attack"]
    assert sal[1:4] == [
        f"{natural['sal/worst']:.3f}",
        f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}",
        f"{values[0]:.3f}",
    ]
    assert sal[4:] == [">= 0.65", "yes"]
    gc = statistics.mean(seeds[s]["gc/worst"] for s in seeds)
    assert gc < 0.5 and rows["Grad-CAM: top-k attack"][5] == "**no**"
    # accuracy: mean 0.4933 against natural's 0.5 - 0.005 = 0.495
    assert rows["test accuracy (1,000 images)"][5] == "**no**"
    # randomised-weights overlap: every seed above natural + 0.05 here
    assert rows["Grad-CAM: overlap with randomised-weights maps"][5] == "**no**"
    reference = rows[em.REFERENCE_ROW]
    assert reference[0].startswith("map = input") and reference[4:] == ["-", "-"]
    assert rows["saliency: overlap with the input"][5] == ""
