"""The fleet benchmark's figures (benchmarks/fleet.py): per-group percentiles of time lag, the
per-fleet summary and its markdown table (benchmarks/RESULTS.md, "Fleet"), and the chart of time
lag over the run. Pure functions of the samples; matplotlib is imported only to draw.

Draw the chart again from a run's JSON (e.g. after changing its look):

    .venv/bin/python benchmarks/fleet_report.py benchmarks/results/fleet.json [--out PNG]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SideFigures", "draw_chart", "markdown_table", "percentile", "side_figures"]

COLOURS = {"static": "tab:red", "groupops": "tab:blue"}


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of the values that are not NaN (NaN if none)."""
    known = sorted(v for v in values if not math.isnan(v))
    if not known:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(known)))
    return known[rank - 1]


@dataclass(frozen=True, slots=True)
class SideFigures:
    """One fleet's figures: per group the p99 and max of its time-lag samples (seconds), the
    partitions moved as the plan watch and as the operator's counter saw them, the handoffs
    started and the most in flight at once."""

    side: str
    group_p99: dict[str, float]
    group_max: dict[str, float]
    moves_watched: int
    moves_operator: float
    handoffs_started: int
    most_in_flight: int

    @property
    def groups(self) -> int:
        return len(self.group_p99)


def side_figures(
    side: str,
    policies: Sequence[str],
    *,
    lags: Mapping[str, Sequence[float]],
    moves_watched: Mapping[str, int],
    moves_operator: Mapping[str, float],
    handoffs_started: int,
    most_in_flight: int,
) -> SideFigures:
    return SideFigures(
        side=side,
        group_p99={p: percentile(lags.get(p, []), 99) for p in policies},
        group_max={p: percentile(lags.get(p, []), 100) for p in policies},
        moves_watched=sum(moves_watched.get(p, 0) for p in policies),
        moves_operator=sum(moves_operator.get(p, 0.0) for p in policies),
        handoffs_started=handoffs_started,
        most_in_flight=most_in_flight,
    )


def markdown_table(figures: Sequence[SideFigures], budget: int) -> str:
    lines = [
        "| fleet | groups | per-group p99 time lag: p50 / p99 / max over groups | max time lag "
        "| partitions moved (watch / operator metric) | handoffs | max handoffs in flight (budget) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for f in figures:
        p99s = list(f.group_p99.values())
        limit = budget if f.side == "groupops" else "none"
        lines.append(
            f"| {f.side} | {f.groups} | {percentile(p99s, 50):.1f} / {percentile(p99s, 99):.1f} / "
            f"{max(p99s):.1f} s | {max(f.group_max.values()):.1f} s | {f.moves_watched} / "
            f"{f.moves_operator:.0f} | {f.handoffs_started} | {f.most_in_flight} ({limit}) |"
        )
    return "\n".join(lines)


def draw_chart(
    path: Path,
    *,
    times: Sequence[float],
    lags_by_side: Mapping[str, Sequence[Sequence[float]]],
    shifts_s: Sequence[float],
    load_started: float,
    in_flight: Sequence[tuple[float, int]],
    waiting: Sequence[tuple[float, int]],
    budget: int,
    title: str,
) -> None:
    """Top: per fleet the median (solid) and max (dashed) over groups of each sample's time lag;
    below: the groupops fleet's handoffs in flight and policies waiting for the budget. Dotted:
    the hot-set shifts (`shifts_s` after the load started)."""
    import matplotlib  # noqa: PLC0415 (only the chart needs it)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    def minutes(at: float) -> float:
        return (at - load_started) / 60

    figure, (lag_axes, budget_axes) = plt.subplots(
        2, 1, figsize=(12, 8), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    xs = [minutes(t) for t in times]
    for side, series in lags_by_side.items():
        by_sample = list(zip(*series, strict=True))
        colour = COLOURS.get(side)
        lag_axes.plot(
            xs,
            [percentile(v, 50) for v in by_sample],
            color=colour,
            linewidth=1.8,
            label=f"{side}: median over groups",
        )
        lag_axes.plot(
            xs,
            [percentile(v, 100) for v in by_sample],
            color=colour,
            linewidth=0.9,
            linestyle="--",
            label=f"{side}: max over groups",
        )
    for shift in shifts_s:
        for axes in (lag_axes, budget_axes):
            axes.axvline(shift / 60, color="grey", linestyle=":", linewidth=1)
    lag_axes.set_ylabel("time lag (s)")
    lag_axes.set_title(title)
    lag_axes.legend(loc="upper left", fontsize=8)
    lag_axes.grid(alpha=0.3)
    if in_flight:
        budget_axes.step(
            [minutes(t) for t, _ in in_flight],
            [n for _, n in in_flight],
            where="post",
            color=COLOURS["groupops"],
            label="handoffs in flight",
        )
    if waiting:
        budget_axes.plot(
            [minutes(t) for t, _ in waiting],
            [w for _, w in waiting],
            color="tab:orange",
            linewidth=0.9,
            label="policies waiting for the budget",
        )
    budget_axes.axhline(
        budget, color="black", linestyle="--", linewidth=1, label=f"maxHandoffsInFlight {budget}"
    )
    budget_axes.set_xlim(left=0)
    budget_axes.set_xlabel("minutes since the load started (dotted: the hot sets shift)")
    budget_axes.set_ylabel("groupops fleet")
    budget_axes.legend(loc="upper left", fontsize=8)
    budget_axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", type=Path, help="a JSON that benchmarks/fleet.py wrote")
    parser.add_argument("--out", type=Path, help="the PNG (default: next to the JSON, <stem>-time-lag.png)")
    args = parser.parse_args()
    document = json.loads(args.run.read_text())
    groups = document["groups"]
    sides = {g["side"] for g in groups}
    run_args = document["args"]
    draw_chart(
        args.out or args.run.with_name(f"{args.run.stem}-time-lag.png"),
        times=document["sample_times"],
        lags_by_side={
            side: [document["time_lag"][g["policy"]] for g in groups if g["side"] == side]
            for side in ("static", "groupops")
            if side in sides
        },
        shifts_s=[phase["start_s"] for phase in document["phases"][1:]],
        load_started=document["load_started"],
        in_flight=[tuple(p) for p in document["in_flight"].get("groupops", [])],
        waiting=[(t, w) for t, _, w, _ in document["cluster_status"]],
        budget=run_args["max_in_flight"],
        title=(
            f"{run_args['groups']} groups per fleet, {run_args['minutes']:g} min: static range vs groupops "
            f"(balanced, budget {run_args['max_in_flight']} handoffs, "
            f"{run_args['max_moved_per_minute']} partitions/min)"
        ),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
