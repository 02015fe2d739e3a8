"""The registered experiments: the studies behind the pages, each `python -m experiments run NAME`.

A page named here lives beside this file; `write_page` names the function that generates it from
its results (experiments/results/) and its prose (experiments/prose/), and a page without one is
written by hand.
"""

from __future__ import annotations

from benchmarks.runner import Entry

TABLES = "experiments.pages:tables_page"  # prose + the tables of results/<page>.json

EXPERIMENTS: dict[str, Entry] = {
    "leaderboard": Entry(
        "experiments.leaderboard",
        "every method, same model, same tuning grid, CV selection, three seeds, five maps",
        page="LEADERBOARD.md",
        write_page="experiments.leaderboard:write_page",
    ),
    "leaderboard_ensemble": Entry(
        "experiments.leaderboard_ensemble",
        "every leaderboard row under the attack ensemble, same images, beside its chance levels",
        page="LEADERBOARD.md",
        write_page="experiments.leaderboard:write_page",
    ),
    "every_map": Entry(
        "experiments.every_map",
        "fit and score candidate recipes for one model robust on every reported map",
        page="EVERY_MAP.md",
        write_page=TABLES,
    ),
    "demo_claims": Entry(
        "experiments.demo_claims",
        "the demo over seeds: the ranges its claim is checked against (package data)",
    ),
    "ensemble_maps": Entry(
        "experiments.ensemble_maps",
        "the shipped MNIST-5k pair on every map under the attack ensemble, with chance levels",
        page="ENSEMBLE_MAPS.md",
        write_page=TABLES,
    ),
    "recipe_search": Entry(
        "experiments.recipe_search",
        "the every-map recipe tuned against the attack ensemble: candidates, proxy, full check",
        page="RECIPE_SEARCH.md",
        write_page=TABLES,
    ),
    "recipe_gradcam": Entry(
        "experiments.recipe_gradcam",
        "why Grad-CAM does not move under the every-map penalty: its attacked maps described",
    ),
    "recipe_gradcam_probe": Entry(
        "experiments.recipe_gradcam_probe",
        "Grad-CAM-only penalties at large weights under the attack ensemble: reachable at a price?",
        page="RECIPE_SEARCH.md",
        write_page=TABLES,
    ),
    "recipe_factor": Entry(
        "experiments.recipe_factor",
        "input-times-gradient maps with their gradient factor frozen: what the input alone loses",
        page="RECIPE_SEARCH.md",
        write_page=TABLES,
    ),
    "recipe_levers": Entry(
        "experiments.recipe_levers",
        "the every-map recipe with one change each aimed at the pixel maps, every map measured",
        page="RECIPE_SEARCH.md",
        write_page=TABLES,
    ),
    "recipe_front": Entry(
        "experiments.recipe_front_report",
        "the every-map recipe's front over every map under the attack ensemble, with seeds",
        page="RECIPE_SEARCH.md",
        write_page=TABLES,
    ),
    "architectures": Entry(
        "experiments.architectures",
        "one recipe, weights unchanged, on several architectures",
        page="ARCHITECTURES.md",
        write_page=TABLES,
    ),
    "measurements": Entry(
        "experiments.measurements",
        "the attacks' noise baseline and directions, Grad-CAM's default layer",
        page="MEASUREMENTS.md",
        write_page=TABLES,
    ),
    "deeplift_captum": Entry(
        "experiments.deeplift_captum",
        "DeepLIFT against Captum's where its hooks lose the rescale rule",
        page="MEASUREMENTS.md",
        write_page=TABLES,
    ),
    "penalty_sweep": Entry(
        "experiments.penalty_sweep",
        "which penalty makes the digits saliency maps most robust, at what cost",
        page="PENALTY_SWEEP.md",
        write_page=TABLES,
    ),
    "sanity_checks": Entry(
        "experiments.sanity_checks",
        "sanity checks of the shipped pair, the map = input reference and LENS",
        page="SANITY.md",
        write_page=TABLES,
    ),
    "sanity_front": Entry(
        "experiments.sanity_front",
        "top-layer dependence (the cascade's top) against robustness and accuracy, many models",
        page="SANITY.md",
        write_page=TABLES,
    ),
    "baselines": Entry(
        "experiments.baselines",
        "PGD adversarial and Gaussian-noise training, tuned by the leaderboard's rule, under the "
        "attack ensemble",
        page="BASELINES.md",
        write_page=TABLES,
    ),
    "lrp_twins": Entry(
        "experiments.lrp_twins",
        "LRP on networks written with calls",
        page="SANITY.md",
        write_page=TABLES,
    ),
    "lrp_robustness": Entry(
        "experiments.lrp_robustness",
        "LRP: the attack's direction, the fine-tuning weight, targets",
        page="LRP.md",
        write_page=TABLES,
    ),
    "cheaper_robustness": Entry(
        "experiments.cheaper_robustness",
        "what the fine-tune recipe costs and keeps on part of each batch",
        page="CHEAPER.md",
        write_page=TABLES,
    ),
    "every_map_levers": Entry(
        "experiments.every_map_levers",
        "what the 224 px every-map recipe's cheaper settings cost in robustness, on a proxy",
    ),
    "explainer_recipes": Entry(
        "experiments.explainer_recipes",
        "fine-tuning against each explainer: surrogate, sweep, summary, table",
        page="NEW_EXPLAINERS.md",
        write_page=TABLES,
    ),
    "ig_sum_norm_seeds": Entry(
        "experiments.ig_sum_norm_seeds",
        "IG-SUM-NORM at the paper's beta on three seeds (a section of the leaderboard's prose)",
    ),
    "independent_attacks": Entry(
        "experiments.independent_attacks",
        "an attack and explainers written apart from the package's, on the shipped models",
        page="INDEPENDENT_ATTACKS.md",
        write_page=TABLES,
    ),
    "certified_front": Entry(
        "experiments.certified_front",
        "the deterministic certificate of the saliency map against accuracy and radius",
        page="CERTIFIED_FRONT.md",
        write_page=TABLES,
    ),
    "certify_curves": Entry(
        "experiments.certify_curves",
        "smoothed saliency: certified top-k overlap against the L2 radius, beside the attack",
        page="CERTIFY.md",
        write_page=TABLES,
    ),
    "cluttered": Entry(
        "experiments.cluttered",
        "natural vs every-map models on cluttered RGB digits, with ground-truth masks",
        page="CLUTTERED.md",
        write_page=TABLES,
    ),
    "cluttered_front": Entry(
        "experiments.cluttered_front",
        "the cluttered benchmark's trade-off front: accuracy lost and cost against top-k gain",
        page="CLUTTERED.md",
        write_page=TABLES,
    ),
    "faithfulness": Entry(
        "experiments.faithfulness",
        "the faithfulness correlation beside the fidelity estimate on the MNIST-5k pair",
        page="FAITHFULNESS.md",
        write_page=TABLES,
    ),
    "cluttered_diagnosis": Entry(
        "experiments.cluttered_diagnosis",
        "why a fine-tuned ResNet-18's Grad-CAM loses its fidelity: BatchNorm modes and layers",
        page="CLUTTERED.md",
        write_page=TABLES,
    ),
    "cluttered_mass": Entry(
        "experiments.cluttered_mass",
        "where a Grad-CAM map's mass falls on cluttered digits: on the digit, beside it, elsewhere",
        page="CLUTTERED.md",
        write_page=TABLES,
    ),
    "cluttered_batchnorm": Entry(
        "experiments.cluttered_batchnorm",
        "whether a cluttered fine-tune's lost accuracy is stale BatchNorm statistics",
        page="CLUTTERED.md",
        write_page=TABLES,
    ),
    "cluttered_head": Entry(
        "experiments.cluttered_head",
        "why the VGG-BN learnt slowly on cluttered digits: short natural fits of its heads",
        page="CLUTTERED.md",
        write_page=TABLES,
    ),
    "attack_figure": Entry(
        "experiments.attack_figure",
        "the README's figure: one top-k attack on a natural and a robust model's saliency",
    ),
}
