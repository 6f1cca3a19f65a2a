#!/usr/bin/python3
"""Render the soapgw Grafana dashboard's panels into one PNG, without Grafana.

Every panel of deploy/grafana/soapgw.json is queried from Prometheus (query_range for
time series, an instant query for bar gauges) and drawn with matplotlib on a grid that
follows the dashboard's layout (rows, gridPos x/width). Grafana's variables are
substituted: $instance and $peer (regexes, default ".*"), $__rate_interval (as Grafana
computes it from --scrape-interval and the step), $__interval (the step) and $__range.

Needs the system interpreter with Debian's python3-matplotlib:

  /usr/bin/python3 scripts/render_dashboard.py --prometheus http://127.0.0.1:9090 \
      --start $(date -d '-15 min' +%s) --end $(date +%s) --out dashboard.png

docs/dashboard.png was made by e2e/prometheus_test.go with SOAPGW_RENDER_DASHBOARD set.
"""
import argparse
import datetime as dt
import json
import math
import re
import sys
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.gridspec import GridSpec  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402


def prom_get(base, path, params):
    url = base.rstrip("/") + path + "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=15) as resp:
        body = json.load(resp)
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params.get('query')!r}: {body.get('error')}")
    return body["data"]


def substitute(expr, variables):
    # Longest names first, so $__rate_interval is not read as $__range + "te_interval".
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", variables[name]).replace("$" + name, variables[name])
    if "$" in expr:
        raise ValueError(f"unresolved variable in {expr!r}")
    return expr


def legend(fmt, labels):
    if not fmt:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__") + "}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()


def si(v, suffix="", base=1000.0, units=("", "k", "M", "G", "T")):
    if v is None or math.isnan(v):
        return ""
    a, i = abs(v), 0
    while a >= base and i < len(units) - 1:
        a, v, i = a / base, v / base, i + 1
    s = f"{v:.3g}"
    return f"{s} {units[i]}{suffix}".strip() if units[i] or suffix else s


def seconds(v):
    a = abs(v)
    if a == 0:
        return "0"
    if a < 1e-3:
        return f"{v * 1e6:.3g} µs"
    if a < 1:
        return f"{v * 1e3:.3g} ms"
    return f"{v:.3g} s"


FORMATTERS = {
    "s": seconds,
    "Bps": lambda v: si(v, "B/s", 1024.0, ("", "Ki", "Mi", "Gi", "Ti")),
    "bytes": lambda v: si(v, "B", 1024.0, ("", "Ki", "Mi", "Gi", "Ti")),
    "percentunit": lambda v: f"{v * 100:.3g}%",
    "reqps": lambda v: si(v, "/s"),
    "cps": lambda v: si(v, "/s"),
    "short": lambda v: si(v),
}


def formatter(unit):
    f = FORMATTERS.get(unit, FORMATTERS["short"])
    return FuncFormatter(lambda v, _pos: f(v))


def draw_timeseries(ax, panel, args, variables, step):
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    lines = []
    for tgt in panel.get("targets", []):
        expr = substitute(tgt["expr"], variables)
        data = prom_get(args.prometheus, "/api/v1/query_range",
                        {"query": expr, "start": args.start, "end": args.end, "step": step})
        for series in data["result"]:
            xs = [dt.datetime.fromtimestamp(float(t), dt.timezone.utc) for t, _ in series["values"]]
            ys = [float(v) for _, v in series["values"]]
            lines.append((xs, ys, legend(tgt.get("legendFormat"), series["metric"])))
    n = len(lines)
    if n > 8:
        # A picture cannot hover like Grafana: leave out the series that stayed at 0.
        shown = [ln for ln in lines if any(y != 0 and not math.isnan(y) for y in ln[1])]
        if len(shown) < n:
            ax.set_title(f"{panel['title']}  ({n - len(shown)} all-zero series not shown)", fontsize=10, loc="left")
            lines = shown
    for xs, ys, label in lines:
        ax.plot(xs, ys, linewidth=1.2, label=label)
    ax.margins(y=0.08)
    ax.yaxis.set_major_formatter(formatter(unit))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=dt.timezone.utc))
    ax.xaxis.set_major_locator(mdates.AutoDateLocator(maxticks=5))
    ax.set_xlim(dt.datetime.fromtimestamp(args.start, dt.timezone.utc), dt.datetime.fromtimestamp(args.end, dt.timezone.utc))
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    if "min" in defaults:
        finite = [y for _, ys, _ in lines for y in ys if not math.isnan(y) and not math.isinf(y)]
        top = max(finite, default=0)
        ax.set_ylim(defaults["min"], top * 1.12 if top > defaults["min"] else defaults["min"] + 1)
    if lines:
        ax.legend(fontsize=6, loc="upper left", ncol=2 if n > 5 else 1, framealpha=0.7, handlelength=1.2)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")
    return n


def draw_bars(ax, panel, args, variables):
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    names, values = [], []
    for tgt in panel.get("targets", []):
        expr = substitute(tgt["expr"], variables)
        data = prom_get(args.prometheus, "/api/v1/query", {"query": expr, "time": args.end})
        for series in data["result"]:
            names.append(legend(tgt.get("legendFormat"), series["metric"]))
            values.append(float(series["value"][1]))
    order = sorted(range(len(values)), key=lambda i: values[i])
    names = [names[i] for i in order]
    values = [values[i] for i in order]
    bars = ax.barh(range(len(values)), values, color="#f2a36b")
    ax.set_yticks([])  # names go inside the bars: tick labels would run into the next panel
    ax.xaxis.set_major_formatter(formatter(unit))
    ax.tick_params(axis="x", labelsize=7)
    fmt = FORMATTERS.get(unit, FORMATTERS["short"])
    for b, name, v in zip(bars, names, values):
        y = b.get_y() + b.get_height() / 2
        ax.text(0, y, "  " + name, va="center", ha="left", fontsize=8)
        ax.text(b.get_width(), y, " " + fmt(v), va="center", ha="left", fontsize=8, fontweight="bold")
    if values:
        ax.set_xlim(0, max(values) * 1.25 or 1)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")
    ax.grid(True, axis="x", alpha=0.3)
    return len(values)


def parse_duration(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", s)
    if not m:
        raise argparse.ArgumentTypeError(f"bad duration {s!r}")
    return float(m.group(1)) * {"ms": 1e-3, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def prom_duration(seconds_):
    return f"{max(1, int(round(seconds_)))}s"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prometheus", required=True, help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    ap.add_argument("--dashboard", default="deploy/grafana/soapgw.json")
    ap.add_argument("--out", required=True, help="PNG file to write")
    ap.add_argument("--start", type=float, required=True, help="unix seconds")
    ap.add_argument("--end", type=float, required=True, help="unix seconds")
    ap.add_argument("--step", type=parse_duration, help="query step (default: range/240, at least 1s)")
    ap.add_argument("--scrape-interval", type=parse_duration, default=15.0,
                    help="Prometheus' scrape interval, for $__rate_interval (default 15s)")
    ap.add_argument("--var", action="append", default=[], metavar="NAME=REGEX",
                    help="dashboard variable value (default instance=.* and peer=.*)")
    ap.add_argument("--dpi", type=int, default=110, help="PNG resolution")
    args = ap.parse_args()

    with open(args.dashboard) as f:
        dash = json.load(f)
    span = args.end - args.start
    step = args.step or max(1.0, span / 240)
    variables = {"instance": ".*", "peer": ".*"}
    for v in args.var:
        k, _, val = v.partition("=")
        variables[k] = val
    variables["__interval"] = prom_duration(step)
    variables["__rate_interval"] = prom_duration(max(4 * args.scrape_interval, step + args.scrape_interval))
    variables["__range"] = prom_duration(span)

    # Lay the panels out as Grafana does: each distinct gridPos.y is a line of the figure,
    # a row panel a thin header line; x and w are in 24ths of the width.
    panels = dash["panels"]
    lines = sorted({p["gridPos"]["y"] for p in panels})
    line_of = {y: i for i, y in enumerate(lines)}
    is_row_line = {y: all(p["type"] == "row" for p in panels if p["gridPos"]["y"] == y) for y in lines}
    heights = [0.22 if is_row_line[y] else 2.6 for y in lines]
    fig = plt.figure(figsize=(20, sum(heights) + 1.0))
    gs = GridSpec(len(lines), 24, figure=fig, height_ratios=heights, hspace=0.55, wspace=1.6,
                  top=1 - 0.9 / (sum(heights) + 1.0), bottom=0.02, left=0.04, right=0.99)
    t0 = dt.datetime.fromtimestamp(args.start, dt.timezone.utc)
    t1 = dt.datetime.fromtimestamp(args.end, dt.timezone.utc)
    filt = ", ".join(f"{k}=~{variables[k]}" for k in ("instance", "peer"))
    fig.suptitle(f"{dash['title']}  —  {t0:%Y-%m-%d %H:%M:%S} to {t1:%H:%M:%S} UTC  ({filt}; rate interval "
                 f"{variables['__rate_interval']})", fontsize=15, fontweight="bold")
    empty = []
    for p in panels:
        g = p["gridPos"]
        line = line_of[g["y"]]
        ax = fig.add_subplot(gs[line, g["x"]:g["x"] + g["w"]])
        if p["type"] == "row":
            ax.axis("off")
            ax.text(0, 0.5, p["title"], fontsize=13, fontweight="bold", va="center", color="#1f4e79")
            ax.axhline(0.05, color="#1f4e79", linewidth=1)
            continue
        ax.set_title(p["title"], fontsize=10, loc="left")
        if p["type"] == "bargauge" or all(t.get("instant") for t in p.get("targets", [])):
            n = draw_bars(ax, p, args, variables)
        else:
            n = draw_timeseries(ax, p, args, variables, step)
        if n == 0:
            empty.append(p["title"])
    fig.savefig(args.out, dpi=args.dpi)
    print(f"wrote {args.out}: {sum(1 for p in panels if p['type'] != 'row')} panels"
          + (f"; no data in: {', '.join(empty)}" if empty else ""))
    return 1 if empty else 0


if __name__ == "__main__":
    sys.exit(main())
