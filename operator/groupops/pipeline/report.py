"""`report`: an HTML page with three PNG charts from the snapshots and the backtest.

Charts (matplotlib's object API: a `Figure` renders to PNG through Agg, no pyplot state, no\ndisplay):
- `lag_over_time.png`: each group's total lag per step (the `max_groups` groups with the highest
  peak, so the chart stays readable);
- `strategy_comparison.png`: per group, the mean max member lag each strategy would have had
  (bars; lower is better), with the mean lower bound as a dashed tick;
- `imbalance_heatmap.png`: groups × strategies, mean imbalance (max member lag / lower bound,
  1.0 is perfect), annotated.
`index.html` embeds them and tabulates the backtest summary with each group's best strategy.

The Spark part (`lag_over_time`) is a transform; rendering takes the small pandas frames the job
entry point collects.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from pyspark.sql import DataFrame
from pyspark.sql import functions as sf

from groupops.pipeline.backtest import replay_points

__all__ = ["ReportFiles", "lag_over_time", "render_report"]

CHART_FILES = ("lag_over_time.png", "strategy_comparison.png", "imbalance_heatmap.png")


def lag_over_time(snapshots: DataFrame, *, step_s: float) -> DataFrame:
    """Total lag of each group per step: cluster, group, step_ts, lag."""
    points = replay_points(snapshots, step_s=step_s)
    return (
        points.groupBy("cluster", "group", "step_t")
        .agg(sf.sum("lag").alias("lag"))
        .select("cluster", "group", sf.timestamp_seconds("step_t").alias("step_ts"), "lag")
    )


@dataclass(frozen=True, slots=True)
class ReportFiles:
    html: Path
    charts: tuple[Path, ...]


def _label(frame: pd.DataFrame) -> pd.Series:
    clusters = frame["cluster"].nunique() if len(frame) else 0
    if clusters > 1:
        return frame["cluster"].astype(str) + "/" + frame["group"].astype(str)
    return frame["group"].astype(str)


def _thousands(axes: Axes) -> None:
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:,.0f}"))


def _scored(summary: pd.DataFrame) -> pd.DataFrame:
    scored = summary[summary["error"].isna()]
    return scored.assign(label=_label(scored))


def _plot_lag(lag: pd.DataFrame, path: Path, max_groups: int) -> None:
    figure = Figure(figsize=(10, 5), dpi=100, layout="tight")
    axes = figure.subplots()
    frame = lag.assign(label=_label(lag))
    peaks = frame.groupby("label")["lag"].max().sort_values(ascending=False)
    shown = list(peaks.index[:max_groups])
    for label in shown:
        series = frame[frame["label"] == label].sort_values("step_ts")
        axes.plot(series["step_ts"], series["lag"], label=label, linewidth=1.6)
    hidden = len(peaks) - len(shown)
    title = "Total lag per group over time" + (
        f" ({len(shown)} highest of {len(peaks)})" if hidden > 0 else ""
    )
    axes.set_title(title)
    axes.set_xlabel("time (UTC)")
    axes.set_ylabel("lag (messages)")
    axes.grid(alpha=0.3)
    _thousands(axes)
    if shown:
        axes.legend(fontsize=8, ncol=2)
    figure.autofmt_xdate()
    figure.savefig(path)


def _plot_strategies(summary: pd.DataFrame, path: Path, max_groups: int) -> None:
    scored = _scored(summary)
    strategies = sorted(scored["strategy"].unique())
    worst = scored.groupby("label")["mean_max_member_lag"].max().sort_values(ascending=False)
    labels = sorted(worst.index[:max_groups])
    figure = Figure(figsize=(max(8, 1.4 * len(labels) + 4), 5), dpi=100, layout="tight")
    axes = figure.subplots()
    width = 0.8 / max(1, len(strategies))
    x = np.arange(len(labels))
    for index, strategy in enumerate(strategies):
        rows = scored[scored["strategy"] == strategy].set_index("label")
        values = [float(rows["mean_max_member_lag"].get(label, np.nan)) for label in labels]
        axes.bar(x + (index - (len(strategies) - 1) / 2) * width, values, width, label=strategy)
    bounds = scored.groupby("label")["mean_lower_bound"].max()
    for position, label in enumerate(labels):
        axes.hlines(
            float(bounds[label]), position - 0.42, position + 0.42, colors="black", linestyles="dashed"
        )
    axes.set_xticks(x, labels, rotation=30 if len(labels) > 6 else 0)
    axes.set_title("Mean max member lag by strategy (lower is better; dashed: lower bound)")
    axes.set_ylabel("max member lag (messages)")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes.grid(axis="y", alpha=0.3)
    _thousands(axes)
    figure.savefig(path)


def _plot_heatmap(summary: pd.DataFrame, path: Path, max_groups: int) -> None:
    scored = _scored(summary)
    table = scored.pivot_table(index="label", columns="strategy", values="mean_imbalance", aggfunc="mean")
    table = table.loc[table.max(axis=1).sort_values(ascending=False).index[:max_groups]].sort_index()
    values = table.to_numpy(dtype=float)
    top = max(1.5, float(np.nanmax(values))) if values.size else 1.5
    figure = Figure(
        figsize=(1.2 * len(table.columns) + 3, 0.5 * len(table.index) + 2), dpi=100, layout="tight"
    )
    axes = figure.subplots()
    image = axes.imshow(values, cmap="RdYlGn_r", vmin=1.0, vmax=top, aspect="auto")
    axes.set_xticks(range(len(table.columns)), list(table.columns))
    axes.set_yticks(range(len(table.index)), list(table.index))
    for row in range(values.shape[0]):
        for column in range(values.shape[1]):
            if not np.isnan(values[row, column]):
                axes.text(column, row, f"{values[row, column]:.2f}", ha="center", va="center", fontsize=9)
    axes.set_title("Mean imbalance (max member lag / lower bound)")
    figure.colorbar(image, ax=axes, shrink=0.8, label="1.00 is perfect")
    figure.savefig(path)


def _html(summary: pd.DataFrame, charts: tuple[Path, ...], title: str) -> str:
    scored = summary[summary["error"].isna()]
    best = (
        scored.sort_values(["cluster", "group", "mean_max_member_lag"]).groupby(["cluster", "group"]).head(1)
    )
    rows = []
    for _, row in summary.sort_values(["cluster", "group", "rank"], na_position="last").iterrows():
        mark = (
            " class=best"
            if (
                (best["cluster"] == row["cluster"])
                & (best["group"] == row["group"])
                & (best["strategy"] == row["strategy"])
            ).any()
            else ""
        )
        cells = [
            row["cluster"],
            row["group"],
            row["strategy"],
            "" if pd.isna(row["rank"]) else int(row["rank"]),
            "" if pd.isna(row["mean_max_member_lag"]) else f"{row['mean_max_member_lag']:,.0f}",
            "" if pd.isna(row["mean_imbalance"]) else f"{row['mean_imbalance']:.3f}",
            "" if pd.isna(row["total_moves"]) else int(row["total_moves"]),
            "" if pd.isna(row["mean_drain_s"]) else f"{row['mean_drain_s']:,.0f}",
            "" if pd.isna(row["error"]) else row["error"],
        ]
        rows.append(f"<tr{mark}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    images = "\n".join(
        f'<figure><img src="{html.escape(p.name)}" alt="{html.escape(p.stem)}"></figure>' for p in charts
    )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "cluster",
            "group",
            "strategy",
            "rank",
            "mean max member lag",
            "mean imbalance",
            "moves",
            "mean drain (s)",
            "note",
        )
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}tr.best{{background:#e6f4e6}}
figure{{margin:1em 0}}img{{max-width:100%}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>Backtest: every group's history replayed under each strategy; rank 1 has the lowest mean max member lag.
Imbalance is max member lag over its lower bound. Drain: seconds for the most loaded member at the group's
average per-member consume rate.</p>
{images}
<h2>Backtest summary</h2>
<table><thead><tr>{head}</tr></thead><tbody>
{chr(10).join(rows)}
</tbody></table></body></html>
"""


def render_report(
    out_dir: Path,
    *,
    lag: pd.DataFrame,
    summary: pd.DataFrame,
    max_groups: int = 12,
    title: str = "groupops pipeline report",
) -> ReportFiles:
    """Write the three PNGs and index.html into `out_dir` (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    charts = tuple(out_dir / name for name in CHART_FILES)
    _plot_lag(lag, charts[0], max_groups)
    _plot_strategies(summary, charts[1], max_groups)
    _plot_heatmap(summary, charts[2], max_groups)
    page = out_dir / "index.html"
    page.write_text(_html(summary, charts, title), encoding="utf-8")
    return ReportFiles(html=page, charts=charts)
