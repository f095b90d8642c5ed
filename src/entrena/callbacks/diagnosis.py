"""What the efficiency figures mean and what to change: pure functions over plain dicts.

Each finding is ``{"code", "group", "figure", "message", "change"}``: the figure that
triggered it, in words, and the change to make. ``group`` says what the change is to
(:data:`GROUPS`, in the order findings are listed): what the user decides (``data``,
``model``, ``training``) before what the machine shows (``hardware``, ``plan``).
:func:`window_findings` runs on one monitoring window (live
warnings when a condition persists); :func:`diagnose` on the whole fit (``metrics.json``'s
``diagnosis``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["GROUPS", "FINDING_GROUPS", "group_of", "order_findings",
           "INPUT_BOUND_FRACTION", "PADDING_WASTE_FRACTION", "LOW_MEMORY_SHARE",
           "HIGH_MEMORY_SHARE", "LOW_MFU", "IDLE_THREADS_SHARE", "PLAN_TOLERANCE",
           "window_findings", "diagnose"]

INPUT_BOUND_FRACTION = 0.20
"""Data wait above this share of step time: the run waits for its input."""
PADDING_WASTE_FRACTION = 0.30
"""Padding above this share of token slots: compute spent on padding."""
LOW_MEMORY_SHARE = 0.25
"""Peak memory below this share of the device's: room for a larger batch."""
HIGH_MEMORY_SHARE = 0.90
"""Peak memory above this share: one longer batch away from out-of-memory."""
LOW_MFU = {"cpu": 0.25, "cuda": 0.20}
"""MFU below this is called low (CPU: against the measured matmul peak; GPU: the catalog
peak, where 30-50% is usual for well-fed transformer training)."""
IDLE_THREADS_SHARE = 0.6
"""Process CPU time below this share of ``threads × wall time``: threads sit idle."""
PLAN_TOLERANCE = {"peak_memory_bytes": 0.25, "epoch_time_s": 0.50}
"""How far actual may be from plan (relative) before it is reported. The planner states no
error of its own yet; these are provisional bounds, to be replaced by its measured error."""


GROUPS = ("data", "model", "training", "hardware", "plan")
"""What a finding's change is to, in the order ``metrics.json``'s ``diagnosis`` lists them:
the data, the model, the training settings (epochs, batch shapes), then the machine and the
plan, which a newcomer acts on last."""
FINDING_GROUPS = {
    "no_test_split": "data", "one_class": "model", "baseline_ties": "model",
    "baseline_wins": "model", "no_better_than_mean": "model", "every_tag": "model",
    "near_constant": "model", "one_answer": "model",
    "trees_enough": "model",
    "early_stopping_saved": "training", "padding_waste": "training",
    "input_bound": "hardware", "memory_headroom": "hardware", "memory_tight": "hardware",
    "low_mfu": "hardware", "threads_idle": "hardware", "threads_fewer_than_cores": "hardware",
    "plan_off": "plan",
}
"""The group of each finding code; a code not listed (a task's or a plugin's) is ``model``."""


def group_of(code: str) -> str:
    """The group of a finding code (:data:`FINDING_GROUPS`, else ``model``)."""
    return FINDING_GROUPS.get(code, "model")


def order_findings(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``findings`` with ``group`` filled in, sorted by :data:`GROUPS` (stable within one)."""
    grouped = [{**f, "group": f.get("group") or group_of(str(f.get("code", "")))}
               for f in findings]
    return sorted(grouped, key=lambda f: GROUPS.index(f["group"])
                  if f["group"] in GROUPS else len(GROUPS))


def _finding(code: str, figure: str, message: str, change: str) -> dict[str, str]:
    return {"code": code, "group": group_of(code), "figure": figure, "message": message,
            "change": change}


def window_findings(window: dict[str, Any]) -> list[dict[str, str]]:
    """Conditions visible in one window: input-bound, padding waste."""
    found = []
    wait = window.get("data_wait_fraction")
    if wait is not None and wait > INPUT_BOUND_FRACTION:
        found.append(_finding(
            "input_bound", f"data wait {wait:.0%} of step time",
            f"input-bound: {wait:.0%} of each step waits for the batch (above "
            f"{INPUT_BOUND_FRACTION:.0%})",
            "feed the device faster: keep the data in the prepared (encoded) cache, make the "
            "source cheaper to read, pin memory and prefetch on a GPU, or use more loader "
            "workers"))
    padding = window.get("padding_fraction")
    if padding is not None and padding > PADDING_WASTE_FRACTION:
        found.append(_finding(
            "padding_waste", f"padding {padding:.0%} of token slots",
            f"padding waste: {padding:.0%} of the tokens computed are padding (above "
            f"{PADDING_WASTE_FRACTION:.0%})",
            "keep train.group_by_length: true (batches of similar lengths, the default); for "
            "short texts lower data.pad_to_multiple_of (each batch is padded up to a multiple "
            "of it: 16 pads a batch of 20-token texts to 32); or lower model.max_length"))
    return found


def _mfu_cause(summary: dict[str, Any]) -> str:
    if (summary.get("data_wait_fraction") or 0) > INPUT_BOUND_FRACTION:
        return "the device waits for data (see input-bound)"
    if (summary.get("padding_fraction") or 0) > PADDING_WASTE_FRACTION:
        return "padding is computed but not counted as useful (see padding waste)"
    step_flops = summary.get("useful_flops_per_step") or 0
    if summary.get("device") == "cuda" and step_flops < 1e12:
        return (f"steps are small ({step_flops / 1e9:.1f} GFLOP): kernel launches and the "
                f"Python loop dominate; raise train.batch_size or use a larger model")
    if summary.get("device") == "cuda" and summary.get("precision") == "32-true":
        return "fp32 on a GPU: set train.precision: bf16-mixed to use the tensor cores"
    return ("the model's matrices are small (narrow layers and short sequences do not fill "
            "the device); raise train.batch_size to give each step more work")


def diagnose(summary: dict[str, Any], *, plan_vs_actual: dict[str, Any] | None = None,
             fit: dict[str, Any] | None = None) -> list[dict[str, str]]:
    """Findings over the whole fit.

    Args:
        summary: ``metrics.json``'s ``efficiency`` (plus ``device``, ``precision``,
            ``threads``, ``cores``).
        plan_vs_actual: ``metrics.json``'s ``plan_vs_actual``.
        fit: ``{"stop_reason", "epochs", "max_epochs", "epoch_time_s", "usd_per_hour",
            "peak_remembered"}`` (the last: the fit's peak was kept for the next plan of its
            shape, so a CPU peak above the plan needs no action).

    Returns:
        The findings, in :data:`GROUPS` order (:func:`order_findings`).
    """
    found = window_findings(summary)
    share = summary.get("memory_share")
    peak, capacity = summary.get("peak_memory_bytes"), summary.get("memory_capacity_bytes")
    if share is not None and peak and capacity:
        figure = f"peak memory {peak / 2**30:.2f} GiB of {capacity / 2**30:.1f} GiB ({share:.0%})"
        if share < LOW_MEMORY_SHARE:
            found.append(_finding(
                "memory_headroom", figure,
                f"memory headroom: the fit used {share:.0%} of the device's memory",
                f"a batch about {max(2, int(HIGH_MEMORY_SHARE / max(share, 1e-3) // 2))}x larger "
                f"would fit (train.batch_size; fewer, larger steps), or choose a smaller, "
                f"cheaper machine"))
        elif share > HIGH_MEMORY_SHARE:
            found.append(_finding(
                "memory_tight", figure, f"memory is tight: {share:.0%} of the device's memory",
                "lower train.batch_size and raise train.gradient_accumulation_steps, or "
                "lower model.max_length"))
    mfu, device = summary.get("mfu"), summary.get("device", "cpu")
    low = LOW_MFU.get(device, LOW_MFU["cuda"])
    if mfu is not None and mfu < low:
        found.append(_finding(
            "low_mfu", f"MFU {mfu:.1%} of {summary.get('peak_flops_per_s', 0) / 1e12:.2f} "
            f"TFLOP/s ({summary.get('peak_source', '')})",
            f"low MFU: {mfu:.1%} of the device's peak (below {low:.0%})",
            f"likely cause: {_mfu_cause(summary)}"))
    used, threads = summary.get("cpu_utilisation"), summary.get("threads")
    cores = summary.get("cores")
    if device == "cpu" and used is not None and threads and used < IDLE_THREADS_SHARE:
        found.append(_finding(
            "threads_idle", f"CPU busy {used:.0%} of {threads} thread(s) x wall time",
            f"threads not used: the process kept its {threads} thread(s) {used:.0%} busy",
            "other work is competing for the cores, or the steps are too small to spread "
            "over threads: raise train.batch_size, or run fewer processes at once"
            if threads > 1 else
            "other work is competing for the core, or the run waits outside its training "
            "steps (reading data, evaluating, checkpoints): run fewer processes at once"))
    elif device == "cpu" and threads and cores and threads < cores:
        found.append(_finding(
            "threads_fewer_than_cores", f"{threads} thread(s) on {cores} cores",
            f"threads not used: torch ran {threads} thread(s) on a {cores}-core machine",
            f"set train.num_threads: {cores} (or leave it unset) when nothing else runs here"))
    if fit and fit.get("stop_reason") == "early_stopping":
        saved = (fit.get("max_epochs") or 0) - (fit.get("epochs") or 0)
        epoch_s = fit.get("epoch_time_s")
        if saved > 0 and epoch_s:
            minutes = saved * epoch_s / 60
            price = fit.get("usd_per_hour")
            cost = (f", ≈ {saved * epoch_s / 3600 * price:.2f} USD" if price else "")
            found.append(_finding(
                "early_stopping_saved", f"{saved} epoch(s) not run",
                f"early stopping saved {saved} epoch(s) (≈ {minutes:.1f} min{cost})",
                "nothing to change: the validation metric had stopped improving"))
    for key, tolerance in PLAN_TOLERANCE.items():
        pair = (plan_vs_actual or {}).get(key) or {}
        predicted, actual = pair.get("predicted"), pair.get("actual")
        if predicted and actual and abs(actual / predicted - 1) > tolerance:
            ratio = actual / predicted
            grew = (key == "peak_memory_bytes" and ratio > 1
                    and bool((fit or {}).get("peak_remembered")))
            found.append(_finding(
                "plan_off", f"{key}: actual {actual:.4g} vs predicted {predicted:.4g} "
                f"({ratio:.2f}x)",
                f"plan vs actual: {key} off by {abs(ratio - 1):.0%} (tolerance "
                f"{tolerance:.0%})",
                "nothing to do: the C allocator's heap grew over the fit past the one step "
                "the plan measured; the next fit of this model and batch shape here is "
                "planned from this fit's peak" if grew else
                "re-plan with entrena plan --calibrate on an idle machine; other load or a "
                "changed config shifts the figures"))
    return order_findings(found)
