"""The HTML page: one static file, figures beside it as PNG, no network and no JavaScript
libraries, readable on screen and on paper.

The only script is a self-check that records, after load, how many images decoded; it
lets a headless browser test (and a curious reader) confirm the page is complete.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simctl.reports.context import FigureOut
from simctl.reports.errors import Notes
from simctl.reports.load import Run, Study
from simctl.reports.tables import Table

CSS = """
:root { --fg:#1a1a1a; --muted:#555; --rule:#ccc; --best:#fff3c4; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--fg); max-width: 1180px; margin: 1.5em auto; padding: 0 1em; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { border-bottom: 1px solid var(--rule); padding-bottom: .2em;
     margin-top: 1.8em; } h3 { font-size: 1.05em; }
.sub, figcaption, .note { color: var(--muted); font-size: .9em; }
nav a { margin-right: 1em; }
table.data { border-collapse: collapse; font-size: .9em; margin: .6em 0; }
table.data th, table.data td { border: 1px solid var(--rule); padding: .25em .55em; }
table.data th { background: #f2f2f2; text-align: center; }
td.num, td.best { text-align: right; font-variant-numeric: tabular-nums; }
td.best { font-weight: 700; background: var(--best); }
table.kv td { padding: .1em .8em .1em 0; vertical-align: top; font-size: .9em; }
table.kv td:first-child { color: var(--muted); white-space: nowrap; }
figure { margin: 1em 0 1.6em; break-inside: avoid; page-break-inside: avoid; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
details.more > summary { cursor: pointer; color: #0072B2; margin: .4em 0; }
.warn { border-left: 4px solid #d55e00; background: #fff4ec; padding: .5em 1em; margin: 1em 0; }
.warn li, .leftout li { margin: .2em 0; }
pre { background: #f7f7f7; padding: .5em; overflow-x: auto; font-size: .8em; white-space: pre-wrap; }
code { font-size: .92em; }
footer { margin-top: 2.5em; border-top: 1px solid var(--rule); font-size: .9em; }
#selfcheck { display: none; }
@media print {
  body { max-width: none; margin: 0; font-size: 10pt; } nav { display: none; }
  h2 { break-after: avoid; page-break-after: avoid; }
  td.best { background: none; text-decoration: underline; }
  a { color: inherit; text-decoration: none; }
  details.more > summary { display: none; } details.more > figure { display: none; }
}
"""

SELF_CHECK = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var broken = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  var el = document.getElementById('selfcheck');
  el.setAttribute('data-images', String(imgs.length));
  el.setAttribute('data-broken', String(broken.length));
  el.setAttribute('data-headline', document.getElementById('headline') ? 'yes' : 'no');
  var names = broken.map(function (i) { return i.getAttribute('src'); });
  el.textContent = broken.length ? 'broken: ' + names.join(' ') : 'ok';
});
"""

SECTIONS = (
    ("headline", "Headline"),
    ("breakdown", "Where the time goes"),
    ("steps", "Across steps"),
    ("trace", "Workload"),
    ("dynamics", "Inside the step"),
    ("timeline", "Worker timelines"),
    ("simlive", "Simulated vs measured"),
    ("leftout", "Left out"),
    ("references", "References"),
    ("provenance", "Provenance"),
)

# The papers the figures follow, as the README's "Papers" cites them: full title, arXiv id.
REFERENCES = (
    (
        "SpecActor",
        "R. Cheng, K. Zhou, X. Wei et al.",
        "Fast LLM Post-training via Decoupled and Fastest-of-N Speculation",
        "2511.16193",
    ),
    (
        "Seer",
        "R. Qin, W. He, W. Huang et al.",
        "Seer: Online Context Learning for Fast Synchronous LLM Reinforcement Learning",
        "2511.14617",
    ),
    (
        "TLT",
        "Q. Hu, S. Yang, J. Guo et al.",
        "Taming the Long-Tail: Efficient Reasoning RL Training with Adaptive Drafter (ASPLOS 2026)",
        "2511.16665",
    ),
    (
        "RhymeRL",
        "J. He, T. Li, E. Feng et al.",
        "History Rhymes: Accelerating LLM Reinforcement Learning with RhymeRL",
        "2508.18588",
    ),
    (
        "EfficientRollout",
        "M. Kim, M. Lee et al.",
        "EfficientRollout: System-Aware Self-Speculative Decoding for RL Rollouts (preprint)",
        "",
    ),
)


@dataclass
class PageInput:
    study: Study
    step: int
    baseline: str
    headline: Table
    simlive: Table | None
    figures: list[FigureOut]
    table_files: dict[str, list[str]]  # table name -> relative paths
    notes: Notes
    report_meta: dict[str, Any]
    breakdown: Table | None = None


def _e(text: Any) -> str:
    return html.escape(str(text))


def _figure(f: FigureOut, root: Path) -> str:
    rel = f.path.relative_to(root).as_posix()
    cap = f"<figcaption><b>{_e(f.title)}.</b> {_e(f.caption)}</figcaption>" if f.title or f.caption else ""
    img = f'<img src="{_e(rel)}" alt="{_e(f.title)}" loading="eager">'
    fig = f'<figure id="fig-{_e(f.slug)}">{img}{cap}</figure>'
    if f.collapsed:
        return f'<details class="more"><summary>{_e(f.collapsed)}</summary>{fig}</details>'
    return fig


def _references() -> str:
    items = []
    for short, authors, title, arxiv in REFERENCES:
        where = f"arXiv:{arxiv}" if arxiv else "no arXiv id known to us"  # text: the page links nothing
        items.append(f"<li><b>{_e(short)}</b>: {_e(authors)}, <i>{_e(title)}</i>, {where}.</li>")
    return f"<section id='references'><h2>References</h2><ul>{''.join(items)}</ul></section>"


def _links(files: list[str]) -> str:
    return " · ".join(f'<a href="{_e(p)}">{_e(Path(p).suffix[1:].upper())}</a>' for p in files)


def _kv(rows: list[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><td>{_e(k)}</td><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def _cluster_text(run: Run) -> str:
    c = run.cluster
    if not c:
        return _e(run.doc.get("cluster", "?"))
    gpu = c["gpu"].get("name", "?") if isinstance(c.get("gpu"), dict) else "?"
    spec = f"{c['source']} = " if c.get("source") else ""
    return _e(
        f"{spec}{c.get('nodes')} nodes × {c.get('gpus_per_node')} {gpu}, tp{c.get('tp')}, "
        f"{c.get('num_workers')} workers, GPU memory utilisation {c.get('gpu_mem_util')}"
    )


def _provenance(study: Study, meta: dict[str, Any]) -> str:
    parts = []
    for run in study.runs:
        p = run.provenance
        tm = run.trace_meta
        trace = f"<code>{_e(run.doc.get('trace', '?'))}</code>"
        if tm:
            seed = tm.get("seed") if tm.get("seed") is not None else "–"
            trace += _e(
                f" — preset {tm.get('preset') or '–'}, seed {seed}, model {tm.get('model', '?')}, "
                f"hardware {tm.get('hardware', '?')}, source {tm.get('source', '?')}"
            )
        rows = [
            ("run directory", f"<code>{_e(run.path)}</code>"),
            ("source", _e(run.source)),
            ("trace", trace),
            ("cluster", _cluster_text(run)),
            ("model", _e(p.get("model", "?"))),
            ("cost model", _e(p.get("cost_model", "?"))),
            ("mode / engine", _e(f"{p.get('mode', '?')} {json.dumps(p.get('engine', {}))}")),
            ("seed", _e(run.doc.get("seed", "?"))),
            ("simctl version", _e(p.get("simctl_version", "?"))),
            ("command", f"<code>{_e(p.get('command', '?'))}</code>"),
            ("date", _e(p.get("date", "?"))),
        ]
        params = {s.label: s.summary.get("params", {}) for s in study.series if s.run is run}
        parts.append(f"<h3>Run {_e(run.name)}</h3>" + _kv(rows))
        parts.append(
            "<details open><summary>policy parameters</summary><pre>"
            + _e(json.dumps(params, indent=1, sort_keys=True, default=str))
            + "</pre></details>"
        )
    parts.append(
        "<p class='note'>Report: simctl "
        + _e(meta.get("simctl_version", "?"))
        + f", <code>{_e(meta.get('command', ''))}</code>, {_e(meta.get('date', ''))}.</p>"
    )
    return "".join(parts)


def _warnings(inp: PageInput) -> str:
    items = "".join(f"<li>{_e(w)}</li>" for w in inp.notes.warnings)
    if inp.notes.left_out:
        items += f"<li>{len(inp.notes.left_out)} item(s) left out — see <a href='#leftout'>Left out</a>.</li>"
    return f"<div class='warn' role='alert'><b>Warnings</b><ul>{items}</ul></div>"


def _simlive(inp: PageInput, figures: list[FigureOut], root: Path) -> str:
    out = ["<section id='simlive'><h2>Simulated vs measured</h2>"]
    if inp.simlive is not None:
        out.append(inp.simlive.html("simlive-table"))
        out.append(
            f"<p class='note'>{_e(inp.simlive.note)} Tables: "
            f"{_links(inp.table_files.get('sim_vs_live', []))}.</p>"
        )
        out.extend(_figure(f, root) for f in figures)
    else:
        out.append(
            "<p class='note'>No pair of runs of the same workload and policy from <code>simctl replay</code> "
            "(provenance.source = sim) and <code>simctl live</code> (provenance.source = live) among the "
            "inputs.</p>"
        )
    out.append("</section>")
    return "\n".join(out)


def render(inp: PageInput, root: Path) -> str:
    """The whole page as a string; figure paths are made relative to `root`."""
    study = inp.study
    by_section: dict[str, list[FigureOut]] = {}
    for f in inp.figures:
        by_section.setdefault(f.section, []).append(f)
    runs = ", ".join(f"{r.name} ({r.source})" for r in study.runs)
    out = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>simctl report — {_e(', '.join(s.label for s in study.series))}</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>Rollout comparison report</h1>",
        f"<p class='sub'>{len(study.series)} series from {len(study.runs)} run(s): {_e(runs)}. "
        f"Baseline <b>{_e(inp.baseline)}</b>; step-level figures show step <b>{inp.step}</b> "
        f"({_e(inp.report_meta.get('step_reason', ''))}).</p>",
        "<nav>" + "".join(f'<a href="#{k}">{_e(t)}</a>' for k, t in SECTIONS) + "</nav>",
    ]
    if inp.notes.warnings or inp.notes.left_out:
        out.append(_warnings(inp))

    out.append("<section id='headline'><h2>Headline</h2>")
    out.append(inp.headline.html("headline-table"))
    out.append(
        f"<p class='note'>{_e(inp.headline.note)} Bold/★: best in column. "
        f"Tables: {_links(inp.table_files.get('headline', []))}; per step: "
        f"{_links(inp.table_files.get('per_step', []))}.</p></section>"
    )

    def section(key: str, title: str, intro: str = "") -> None:
        figs = by_section.get(key, [])
        out.append(f"<section id='{key}'><h2>{_e(title)}</h2>{intro}")
        if figs:
            out.extend(_figure(f, root) for f in figs)
        else:
            out.append("<p class='note'>Nothing to show here — see <a href='#leftout'>Left out</a>.</p>")
        out.append("</section>")

    section("breakdown", f"Where the time goes (step {inp.step})")
    if inp.breakdown is not None:
        out.insert(
            len(out) - 1,
            inp.breakdown.html("breakdown-table")
            + f"<p class='note'>{_e(inp.breakdown.note)} Tables: "
            + f"{_links(inp.table_files.get('breakdown', []))}.</p>",
        )
    section("steps", "Across steps")
    section("trace", "Workload")
    section("dynamics", f"Inside step {inp.step}")
    workers = inp.report_meta.get("workers")
    intro = f"<p class='note'>Step {inp.step}; " + (
        f"first {workers} workers per policy (<code>--workers</code>).</p>" if workers else "all workers.</p>"
    )
    section("timeline", "Worker timelines", intro)

    out.append(_simlive(inp, by_section.get("simlive", []), root))

    out.append("<section id='leftout' class='leftout'><h2>Left out</h2>")
    if inp.notes.left_out:
        out.append(
            "<ul>" + "".join(f"<li><b>{_e(w)}</b>: {_e(y)}</li>" for w, y in inp.notes.left_out) + "</ul>"
        )
    else:
        out.append("<p class='note'>Nothing: every section had the data it needs.</p>")
    out.append("</section>")

    out.append(_references())
    out.append(f"<footer id='provenance'><h2>Provenance</h2>{_provenance(study, inp.report_meta)}</footer>")
    out.append("<div id='selfcheck'>pending</div>")
    out.append(f"<script>{SELF_CHECK}</script></body></html>")
    return "\n".join(out)
