"""The "Will it pay here?" panel: this machine's measured step costs, each method's break-even τ, and the cost
model's prediction beside what the run measured. Input: trace meta["cost"] (core.cost.choose.report) and the run's
summary and baseline; no model code here."""
from viz.tokens import esc

PAYS_AT = 1.0  # speedup over plain decoding at which speculation pays


def predicted(v: dict) -> float:
    """A verdict's predicted speedup: its whole run's (prefills included) where known, else its steady state's."""
    return v["run_speedup"] if v.get("run_speedup") is not None else v["speedup"]


def pay_reason(cost: dict, tau: float | None, speedup: float | None) -> str:
    """One sentence: does speculation pay for this run on this machine, and why."""
    run = (cost or {}).get("run")
    if not run:
        return plain_reason(cost or {})
    be, t_ar = run["break_even_tau"], run["t_ar_ms"]
    extra = run["t_step_ms"] - t_ar
    why = (f"a step of {run['shape']} costs {run['t_step_ms']:.1f} ms against {t_ar:.1f} ms for one plain token "
           f"(+{extra:.1f} ms to draft and verify), so it must emit τ ≥ {be:.2f} tokens to break even")
    if tau is None:
        sp = predicted(run)
        verdict = "pays" if sp >= PAYS_AT else "loses"
        return f"Predicted to {verdict[:-1]} here ({sp:.2f}×): {why}; predicted τ {run['tau']:.2f}.{_ceiling(run)}"
    got = f"this run's drafts gave τ {tau:.2f}" + (f" ({speedup:.2f}× measured)" if speedup else "")
    by_tau = tau >= be
    pays = speedup >= PAYS_AT if speedup else by_tau
    text = f"Speculation {'pays' if pays else 'loses'} here: {why}, and {got}."
    if pays != by_tau:
        text += (f" By τ it should {'gain' if by_tau else 'lose'}: the two timed runs differ by more than the costs "
                 "predict, as timings on a busy or shared machine do.")
    return text + _ceiling(run)


def plain_reason(cost: dict) -> str:
    """Where `auto` chose plain decoding: the fastest draft it passed over, and why that one loses here."""
    options = cost.get("methods", []) + ([cost["context"] | {"method": "the context alone"}] if cost.get("context") else [])
    if cost.get("method") != "ar" or not cost.get("shape_note", "").startswith("auto: ") or not options:
        return ""
    best = max(options, key=predicted)
    name = best["method"] if best["method"] == "the context alone" else f"{best['method']} at {best['shape']}"
    sp = predicted(best)
    lead = (f"Plain decoding is fastest here: the best draft, {name}, is predicted at {sp:.2f}× plain decoding."
            if sp < PAYS_AT else
            f"Plain decoding ran, as the calibration predicted no draft to pay; re-read at this moment the best draft, "
            f"{name}, comes to {sp:.2f}×, within the cost model's error.")
    return (f"{lead} Its step costs {best['t_step_ms']:.1f} ms against {best['t_ar_ms']:.1f} ms for one plain "
            f"token, so it must emit τ ≥ {best['break_even_tau']:.2f} tokens to break even; its drafts give a predicted "
            f"τ {best['tau']:.2f}.{_ceiling(best)}")


def _ceiling(run: dict) -> str:
    """The most this drafter's costs allow here: a draft the target always accepts (cost.ceiling)."""
    if run.get("ceiling") is None:
        return ""
    return (f" At these costs even a draft the target always accepted would gain at most {run['ceiling']:.2f}× "
            "step for step.")


def _costs_line(cost: dict) -> str:
    c = cost["costs"]
    v = c["verify"]
    curve = " · ".join(f"{n} rows {ms:.1f} ms" for n, ms in v.items() if n != "1")
    heads = " · ".join(f"{m} {ms:.2f} ms" for m, ms in c["head"].items())
    return (f"<b>target step</b> {v['1']:.1f} ms · <b>verify</b> {esc(curve)}<br>"
            f"<b>drafter pass</b> {c['backbone']:.2f} ms · <b>draft head, one row</b> {esc(heads)}")


def _row(v: dict, measured: dict | None = None, own: bool = False) -> str:
    m = measured or {}
    tau, sp = m.get("tau"), m.get("speedup")
    cells = [f"<b>{esc(v['method'])}</b>" + (" (this run)" if own else ""), esc(v["shape"]),
             f"{v['break_even_tau']:.2f}", f"{v['tau']:.2f}", "—" if tau is None else f"{tau:.2f}",
             f"{predicted(v):.2f}×", "—" if sp is None else f"{sp:.2f}×"]
    cls = ' class="pay-own"' if own else ""
    return f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _table(cost: dict, measured: dict) -> str:
    head = ("<tr><th>method</th><th>shape</th><th title=\"tokens per step that match plain decoding\">break-even τ</th>"
            "<th>predicted τ</th><th>measured τ</th><th title=\"this run's row: its whole run, prefills included; the "
            "others: step for step\">predicted</th><th>measured</th></tr>")
    rows = [_row(cost["run"], measured, own=True)] if cost.get("run") else []
    rows += [_row(v) for v in cost.get("methods", [])
             if not (cost.get("run") and v["method"] == cost["run"]["method"] and v["shape"] == cost["run"]["shape"])]
    if cost.get("context") and (not cost.get("run") or cost["run"]["shape"] != cost["context"]["shape"]):
        rows.append(_row(cost["context"] | {"method": "no model draft"}))
    return f'<table>{head}{"".join(rows)}</table>'


def like_yours(rows: list | None) -> str:
    """One line per results row measured on CPUs of this one's class for this model (core.results.like_this_cpu)."""
    out = []
    for r in rows or []:
        f = r.get("figures", {})
        if r.get("kind") == "plain" and f.get("llamacpp_tok_s"):
            what = (f"plain decoding {f['ours_tok_s'] / f['llamacpp_tok_s']:.2f}× llama.cpp's "
                    f"({f['ours_tok_s']:g} / {f['llamacpp_tok_s']:g} tok/s)")
        elif r.get("kind") == "speculation" and f.get("best_spec_x"):
            what = f"best speculation {f['best_spec_x']:.2f}× plain decoding ({f.get('best_spec_label', '')})"
        else:
            continue
        out.append(f"<li>{esc(r.get('cpu_label', ''))}, {r.get('threads')} threads: {esc(what)}, {esc(r.get('date', ''))}"
                   "</li>")
    if not out:
        return ""
    return f'<div class="pay-like">Measured on CPUs like yours:<ul>{"".join(out)}</ul></div>'


def pay_panel(cost: dict | None, summary: dict | None = None, speedup: float | None = None,
              calibrating: dict | None = None, like: list | None = None) -> str:
    """cost: core.cost.choose.report; summary: the run's (its τ); speedup: measured over plain decoding; like: the
    results rows measured on CPUs of this one's class for this model."""
    if not cost:
        return ('<div class="speclens pay-panel pay-empty">Will it pay here? Run a prompt to see this machine\'s '
                'costs and the cost model\'s verdict.</div>')
    shape = f'<div class="pay-shape">{esc(cost.get("shape_note") or "shape: " + cost.get("shape", ""))}</div>'
    if cost.get("missing"):
        state = (calibrating or {}).get("state")
        msg = {"running": f"measuring this machine's step costs now ({esc((calibrating or {}).get('step', ''))}, "
                          f"{(calibrating or {}).get('seconds', 0):.0f} s so far; about a minute, once): "
                          "the next run shows the prediction",
               "failed": f"the calibration failed ({esc((calibrating or {}).get('step', ''))})"}.get(
            state, f"no calibration for this machine and model yet: <code>{esc(cost['missing'])}</code>")
        return (f'<div class="speclens pay-panel"><div class="pay-title">Will it pay here?</div>{shape}<div>{msg}</div>'
                f'{like_yours(like)}</div>')
    tau = (summary or {}).get("mean_accept_len") if summary and summary.get("steps") else None
    measured = {"tau": tau, "speedup": speedup}
    m = cost["machine"]
    where = (f"{esc(m.get('cpu', ''))} · {esc('/'.join(m.get('features', [])) or 'no AVX2')} · {m.get('threads')} threads"
             f" · {esc(cost.get('runtime_note', ''))} · calibrated {esc(cost.get('date', ''))}"
             + (" · re-read at a probe of this machine now" if cost.get("anchored") else ""))
    reason = pay_reason(cost, tau, speedup)
    return (f'<div class="speclens pay-panel" id="pay-panel-body"><div class="pay-title">Will it pay here?</div>'
            f'<div class="pay-reason">{esc(reason)}</div>{shape}<div class="pay-costs">{_costs_line(cost)}</div>'
            f'<div class="compare-table">{_table(cost, measured)}</div><div class="pay-where">{where}</div>'
            f'{like_yours(like)}</div>')
