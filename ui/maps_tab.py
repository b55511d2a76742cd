"""Maps tab: upload a token map, get the doctor's report (core.maps.check) and its coverage per prompt category
beside FR-Spec's shipped table at the same size, for the model chosen in the Run tab.

The upload is gradio's server-side temp copy (type="filepath", as every upload of the app: never a path the
visitor typed); at most MAX_UPLOAD bytes of it are read and parsed in memory by core.maps.formats.read_bytes
(torch.load(weights_only=True), safetensors or JSON, the format sniffed from the bytes); this code writes it
nowhere. Coverage is measured on the
tokenized shipped prompts (tokenizer only: no model weights load, a second or two)."""
import functools
from pathlib import Path

import gradio as gr

import core.engine_thread as engine_thread
from core.errors import SpecError
from ui.models import parse_model_key
from ui.runs import shown_error
from viz.maps import coverage_fig, report_html
from viz.notes import status_note

MAX_UPLOAD = 1 << 20  # app.launch caps uploads at 1 MB too; a 131k-id int64 map is 1 MB
FILE_TYPES = [".pt", ".json", ".safetensors"]


@functools.lru_cache(maxsize=4)
def facts_of(model_id: str):
    from core.maps.model import load_facts
    return load_facts(model_id)


@functools.lru_cache(maxsize=4)
def prompt_runs(model_id: str) -> list:
    """Tokenized shipped prompts with the text-alone I_t (compare's --prompt-tokens mode)."""
    from core.prompts import DEFAULT_PROMPTS
    from core.maps.accept import engine_config
    from core.maps.compare import choose_prompts, prompt_tokens
    cfg = engine_config(model_id, "nanospec", 64)
    return prompt_tokens(choose_prompts([str(DEFAULT_PROMPTS)], None), facts_of(model_id), cfg, None)


def check_upload(path: Path, facts) -> tuple[dict, object]:
    """(report dict, TokenMap or None): the upload's bytes read in memory and checked."""
    from core.maps.check import report
    from core.maps.formats import MapReadError, read_bytes
    size = path.stat().st_size
    if size > MAX_UPLOAD:
        err = MapReadError("too_large", f"{size:,} bytes: uploads are capped at {MAX_UPLOAD:,}")
        return report("upload", None, facts, err), None
    try:
        m = read_bytes(path.read_bytes(), "upload")
    except MapReadError as err:
        return report("upload", None, facts, err), None
    return report("upload", m, facts), m


def coverage_of(m, facts, model_id: str):
    from core.maps.compare import coverage_rows, served_ids
    from core.maps.model import ranked_map
    ids, _ = served_ids(m, facts)
    cols = {f"uploaded map ({len(ids):,})": ids}
    if facts.ranks is not None:
        cols[f"FR-Spec shipped ({len(ids):,})"] = ranked_map(facts.ranks, len(ids), facts.special_ids)
    rows = coverage_rows(prompt_runs(model_id), cols)
    for r in rows:
        r["coverage"]["NanoSpec I_t (text alone)"] = r["coverage"].pop("NanoSpec I_t")
    return rows


def maps_ui(upload, model_key) -> dict:
    """Outputs: note, report, plot."""
    try:
        if not upload:
            return {"note": status_note("Upload a map file: .pt, .json, .safetensors (d2t / t2d)."), "report": "",
                    "plot": None}
        model_id, _ = parse_model_key(model_key)
        facts = engine_thread.call(facts_of, model_id)
        rep, m = check_upload(Path(upload if isinstance(upload, str) else upload.name), facts)
        out = {"report": report_html(rep), "note": status_note(f"Checked against {model_id}.")}
        try:
            rows = engine_thread.call(coverage_of, m, facts, model_id) if m is not None else None
        except SpecError:
            rows = None  # nothing to measure: the report says why
        if rows:
            out["plot"] = coverage_fig(rows, f"Coverage of the tokenized shipped prompts ({rows[-1]['tokens']:,} tokens)")
        return out
    except Exception as e:  # keep serving: one line on screen, the traceback in the server log
        return {"note": shown_error(e)}


def maps_tab(model_dd) -> None:
    """The tab's components and event; model_dd: the Run tab's model dropdown."""
    gr.Markdown("Check a draft vocabulary (token map) before you serve it: SGLang / FR-Spec `.pt`, the JSON list, "
                "or an EAGLE-3 `d2t` / `t2d` safetensors. The report names every fault (wrong dtype, ids out of "
                "range, another tokenizer's size, d2t off by one or all zeros, EOS or chat tokens missing); "
                "the plot shows coverage per category beside FR-Spec's table at the same size, for the model "
                "chosen in the Run tab. Files are read in memory (no pickled code runs) and kept nowhere. "
                "`python -m core maps check|compare` does the same from the command line, and `--fix` repairs.")
    upload = gr.File(label="Token map (≤ 1 MB)", file_types=FILE_TYPES, type="filepath", elem_id="maps-upload")
    note = gr.HTML(elem_id="maps-note")
    report = gr.HTML(elem_id="maps-report")
    plot = gr.Plot(show_label=False, elem_id="maps-plot")
    names = ("note", "report", "plot")
    comps = {"note": note, "report": report, "plot": plot}

    def handler(up, key):
        values = maps_ui(up, key)
        return [values.get(k, gr.skip()) for k in names]
    upload.change(handler, [upload, model_dd], [comps[k] for k in names], api_visibility="private")
