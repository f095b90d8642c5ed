"""The plan for a terminal: a Rich table of the options and the recommendation."""

from __future__ import annotations

from typing import Any

from entrena.units import format_bytes, format_duration, format_usd

__all__ = ["render_plan"]


def _time(seconds: float | None) -> str:
    return format_duration(seconds) if seconds is not None else "?"


def _flags(option: dict[str, Any]) -> list[str]:
    """Short markers for the table; the full notes are in the JSON document."""
    flags = ["oversized"] if option["oversized"] else []
    for note in option["notes"]:
        if note.startswith("uses ") and " of " in note:
            flags.append(note.split(" (")[0].removeprefix("uses ") + " used")
        elif "host VM" in note:
            flags.append("+host VM")
        elif "no native bf16" in note:
            flags.append("no bf16")
        elif note.startswith("time unknown"):
            flags.append("time ?")
    if option["time_source"] and option["time_source"].startswith("probe"):
        flags.append("measured")
    elif option["time_source"] and "lower bound" in option["time_source"]:
        flags.append("time >=")
    return list(dict.fromkeys(flags))


def _budget_table(doc: dict[str, Any]) -> Any:
    """What ``--budget`` buys on each option (``None`` without a budget)."""
    from rich.table import Table

    rows = [o for o in doc["options"] if o.get("budget")]
    if not rows:
        return None
    first = rows[0]["budget"]
    limit = (format_usd(first["budget_usd"]) if first.get("budget_usd") is not None
             else _time(first.get("budget_s")))
    table = Table(title=f"what a budget of {limit} buys, launch to finished run (train "
                        f"--budget lays the schedule over it)", show_header=True)
    for column, justify in (("option", "left"), ("time", "right"), ("steps", "right"),
                            ("epochs", "right"), ("evaluations", "right"),
                            ("fixed costs", "right"), ("verdict", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for option in rows:
        bought = option["budget"]
        if bought.get("enough") is None:
            table.add_row(option["name"], _time(bought.get("budget_s")), "-", "-", "-", "-",
                          bought.get("note") or "no time figures")
            continue
        fixed = bought["startup_s"] + bought["finish_s"] + bought["evaluations"] * bought[
            "eval_s"]
        verdict = ("not binding: the whole run fits" if not bought["binding"]
                   else "binding" if bought["enough"]
                   else f"too small: give {_time(bought['smallest_s'])} or more")
        table.add_row(option["name"], _time(bought["budget_s"]), str(bought["steps"]),
                      f"{bought['epochs']:.2f}", str(bought["evaluations"]), _time(fixed),
                      verdict)
    return table


def render_plan(doc: dict[str, Any]) -> Any:
    """A Rich renderable of a plan document (:func:`~entrena.planning.planner.plan_document`)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    model, data, run = doc["model"], doc["data"], doc["run"]
    if model.get("kind", "transformer") == "transformer":
        head = Text(
            f"model {model['name']}: {model['parameters'] / 1e6:.1f}M parameters "
            f"({model['trainable_parameters'] / 1e6:.1f}M trainable), "
            f"{model['flops_per_sample'] / 1e9:.2f} GFLOP per training sample at the data's "
            f"lengths (attention included)\n"
            f"data: {data['train_rows']} training rows, mean {data['mean_length']:.0f} tokens, "
            f"max_length {data['max_length']}, {data['batches_per_epoch']} batches/epoch of "
            f"{run['batch_size']}, {data['padding_fraction']:.1%} padding; "
            f"{run['epochs']:g} epoch(s) planned")
    else:  # fixed-size inputs (a table row, an image): no lengths, no padding
        head = Text(
            f"model {model['name']}: {model['parameters']:,} parameters "
            f"({model['trainable_parameters']:,} trainable), "
            f"{model['flops_per_sample']:,.0f} FLOP per training sample (forward + backward)\n"
            f"data: {data['train_rows']} training rows, {data['batches_per_epoch']} "
            f"batches/epoch of {run['batch_size']}; {run['epochs']:g} epoch(s) planned")
    table = Table(title="options (this machine first, then by cost)", show_header=True)
    for column, justify in (("option", "left"), ("fits", "left"), ("peak / memory", "right"),
                            ("max batch", "right"), ("epoch", "right"), ("total", "right"),
                            ("cost", "right"), ("spot", "right"), ("flags", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for option in doc["options"]:
        fits = {True: "yes", False: "NO", None: "?"}[option["fits"]]
        peak = format_bytes(option["peak_memory_bytes"]) if option["peak_memory_bytes"] else "?"
        capacity = (format_bytes(option["memory_capacity_bytes"])
                    if option["memory_capacity_bytes"] else "?")
        table.add_row(option["name"], fits, f"{peak} / {capacity}",
                      str(option["max_batch_size"]) if option["max_batch_size"] is not None
                      else "?", _time(option["epoch_time_s"]), _time(option["total_time_s"]),
                      format_usd(option["cost_usd"]), format_usd(option["cost_usd_spot"]),
                      ", ".join(_flags(option)))
    rec = doc["recommendation"]
    budget_table = _budget_table(doc)
    lines = [head]
    for check in doc.get("data_checks") or []:  # what prepare dropped or warned of
        lines.append(Text(f"{check['status']:>8}  {check['check']}: {check['message']}"))
    lines += [table, *([budget_table] if budget_table is not None else []),
              Text(f"recommendation: {rec['summary']}")]
    lines.extend(Text(f"  - {reason}") for reason in rec["reasons"])
    calibration = doc.get("calibration")
    if calibration and calibration.get("flops_per_s"):
        efficiency = calibration.get("efficiency")
        lines.append(Text(
            (f"probe: {calibration['steps']} steps in {calibration['probe_s']:.1f}s, "
             if calibration.get("source", "probe") == "probe"
             else "timed on the memory measurement's step at the longest batch: "
             if calibration.get("source") == "memory measurement"
             else f"timed on the fit's first {calibration['steps']} optimizer steps: ")
            + f"{calibration['flops_per_s'] / 1e9:.1f} GFLOP/s achieved"
            + (f" ({efficiency:.0%} of nominal peak)" if efficiency else "")
            + f", {calibration['step_overhead_s'] * 1000:.0f} ms fixed per step"))
    return Group(*lines)
