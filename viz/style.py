"""CSS for every SpecLens panel (passed to gradio's launch(css=...))."""

CSS = r"""
.speclens { font-size: 14px; line-height: 1.6; }
.speclens .legend { display: flex; flex-wrap: wrap; gap: 6px 10px; align-items: center; margin-top: 8px;
  font-size: 12px; opacity: .9; }
.speclens .legend-note { color: var(--body-text-color-subdued, #666); font-style: italic; }

/* text panel */
.text-scroll { max-height: 340px; overflow: auto; display: flex; flex-direction: column-reverse;
  border: 1px solid var(--border-color-primary, #ddd); border-radius: 8px; padding: 10px 12px;
  background: var(--background-fill-secondary, #fafafa); }
.text-body { white-space: pre-wrap; word-break: break-word; font-family: ui-monospace, SFMono-Regular, Menlo, monospace;
  font-size: 13.5px; }
.tok { border-radius: 3px; padding: 0 1px; }
.tok-prompt { color: #6b7280; font-style: italic; }
.prompt-sep { color: #9ca3af; }
.tok-acc { background: rgba(15,157,88,.18); color: inherit; border-bottom: 2px solid #0f9d58; }
.tok-rej { background: rgba(217,48,37,.14); color: #c5221f; text-decoration: line-through 2px; opacity: .85; }
del.tok-rej { text-decoration-thickness: 2px; }
.tok-bonus { background: rgba(26,115,232,.16); border-bottom: 2px dotted #1a73e8; }
.tok-bonus.tok-oov { border-bottom-style: double; border-bottom-width: 3px; }
.tok-ar { border-bottom: 1px solid rgba(120,120,120,.4); }
.step-now .tok { outline: 2px solid #f9ab00; outline-offset: 0; }
.legend .tok { padding: 0 4px; }

/* stream tape */
.stream-counters { display: flex; flex-wrap: wrap; gap: 6px; margin-bottom: 6px; }
.counter { padding: 1px 8px; border-radius: 10px; background: var(--background-fill-secondary, #f1f3f4);
  border: 1px solid var(--border-color-primary, #ddd); font-size: 12.5px; font-variant-numeric: tabular-nums; }
.stream-minimap { position: relative; height: 6px; border-radius: 3px; background: rgba(128,128,128,.2); margin: 4px 0 8px; }
.minimap-window { position: absolute; top: 0; bottom: 0; border-radius: 3px; background: rgba(249,171,0,.75); }
.stream-tape { max-height: 230px; overflow: auto; display: flex; flex-direction: column-reverse; line-height: 1.95; font-family: ui-monospace, Menlo, monospace;
  font-size: 12px; border: 1px solid var(--border-color-primary, #ddd); border-radius: 8px; padding: 6px 8px; }
.chip { display: inline-block; padding: 0 5px; margin: 1px 2px 1px 0; border-radius: 5px; line-height: 1.5;
  border: 1px solid transparent; white-space: pre; max-width: 12em; overflow: hidden; vertical-align: middle; font-size: 12px; }
.src-prompt { background: rgba(107,114,128,.22); }
.src-prefill { background: rgba(161,66,244,.22); }
.src-draft { background: rgba(15,157,88,.22); }
.src-verify { background: rgba(26,115,232,.22); }
.stream-window { background: rgba(249,171,0,.16); box-decoration-break: clone; -webkit-box-decoration-break: clone;
  border-radius: 6px; padding: 2px 0; outline: 2px dashed rgba(249,171,0,.8); outline-offset: 1px; }
.chip-sample-window { background: rgba(249,171,0,.3); border: 1px dashed rgba(249,171,0,.9); }
.chip-new { animation: chip-in .7s ease-out both; border-color: #f9ab00; font-weight: 600; }
@keyframes chip-in { from { transform: translateY(-6px) scale(.6); opacity: 0; } to { transform: none; opacity: 1; } }
.chip-left { background: rgba(217,48,37,.12); text-decoration: line-through; animation: chip-out 1.4s ease-in forwards; }
.legend .chip-left { animation: none; }
@keyframes chip-out { from { opacity: 1; } to { opacity: .25; } }
.stream-left { margin-top: 6px; font-size: 12px; }
.stream-left-label { margin-right: 6px; color: var(--body-text-color-subdued, #666); }
.tape-more { color: var(--body-text-color-subdued, #888); font-style: italic; margin-right: 6px; font-size: 12px; }
.stream-empty, .tree-empty, .summary-empty { color: var(--body-text-color-subdued, #666); padding: 12px; font-style: italic; }

/* tree */
.tree-scroll { overflow: auto; max-height: 420px; border: 1px solid var(--border-color-primary, #ddd); border-radius: 8px; padding: 4px; }
.tree-caption { font-size: 12.5px; margin-bottom: 4px; }
.tree-svg { display: block; font-family: ui-monospace, Menlo, monospace; font-size: 11.5px; }
.tree-svg .edge { fill: none; stroke: rgba(128,128,128,.55); stroke-width: 1.3; }
.tree-svg .edge-acc { stroke: #0f9d58; stroke-width: 3; }
.tree-svg .edge-bonus { stroke: #1a73e8; stroke-dasharray: 4 3; }
.tree-svg text { fill: var(--body-text-color, #222); }
.tree-svg rect { stroke-width: 1.5; }
.node-draft rect { fill: rgba(128,128,128,.12); stroke: rgba(128,128,128,.6); }
.node-acc rect { fill: rgba(15,157,88,.25); stroke: #0f9d58; stroke-width: 2.5; }
.node-rej rect { fill: rgba(217,48,37,.15); stroke: #d93025; }
.node-bonus rect { fill: rgba(26,115,232,.22); stroke: #1a73e8; stroke-width: 2.5; }
.node-root rect { fill: rgba(107,114,128,.25); stroke: #6b7280; }
.node-oov rect { stroke-dasharray: 4 2; stroke: #d93025; }
.node-key { border: 1.5px solid; }
.node-key.node-acc { background: rgba(15,157,88,.25); border-color: #0f9d58; }
.node-key.node-rej { background: rgba(217,48,37,.15); border-color: #d93025; }
.node-key.node-draft { background: rgba(128,128,128,.12); border-color: rgba(128,128,128,.6); }
.node-key.node-bonus { background: rgba(26,115,232,.22); border-color: #1a73e8; }
.node-key.node-oov { border-style: dashed; border-color: #d93025; }

/* summary */
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(100px, 1fr)); gap: 8px; }
.card { border: 1px solid var(--border-color-primary, #ddd); border-radius: 10px; padding: 6px 10px;
  background: var(--background-fill-secondary, #fafafa); }
.card-v { font-size: 20px; font-weight: 650; font-variant-numeric: tabular-nums; }
.card-k { font-size: 12px; color: var(--body-text-color-subdued, #666); }
.summary-footer { margin-top: 6px; font-size: 12.5px; }
.badge { padding: 1px 8px; border-radius: 10px; font-weight: 600; font-size: 12px; }
.badge-ok { background: rgba(15,157,88,.2); color: #0b7a43; border: 1px solid #0f9d58; }
.badge-bad { background: rgba(217,48,37,.15); color: #c5221f; border: 1px solid #d93025; }
.badge-warn { background: rgba(249,171,0,.2); border: 1px solid #f9ab00; }
.compare-table table { width: 100%; border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
.compare-table th, .compare-table td { padding: 4px 8px; border-bottom: 1px solid var(--border-color-primary, #ddd); text-align: right; }
.compare-table th:first-child, .compare-table td:first-child { text-align: left; }
.compare-col-title { font-weight: 650; margin-bottom: 4px; }
.source-note { font-size: 12.5px; color: var(--body-text-color-subdued, #666); }
.error-box { border: 1px solid #d93025; background: rgba(217,48,37,.08); border-radius: 8px; padding: 8px 12px; }
#replay-row { align-items: center; }
.learn-fig { max-width: 100%; height: auto; }

@media (max-width: 640px) {
  .speclens { font-size: 13px; }
  .text-scroll { max-height: 260px; }
  .stream-tape { max-height: 170px; }
  .card-v { font-size: 17px; }
  .cards { grid-template-columns: repeat(3, 1fr); }
}
"""
CSS += r"""
.compare-grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(280px, 1fr)); gap: 12px; }
"""
CSS += r"""
.chip-out { opacity: .45; text-decoration: line-through; }
.stream-what { font-size: 12px; color: var(--body-text-color-subdued, #666); margin-bottom: 4px; }
"""
CSS += r"""
#replay-buttons { gap: 6px; align-items: center; flex-wrap: wrap; }
#replay-buttons > * { flex: 0 0 auto !important; min-width: 0 !important; }
#speed-radio { flex: 0 0 auto !important; }
"""
CSS += r"""
.compare-table td.row-error { text-align: left; color: #c5221f; }
.pay-panel { border: 1px solid var(--border-color-primary, #ddd); border-radius: 10px; padding: 8px 12px;
  margin-top: 8px; font-size: 13px; }
.pay-title { font-weight: 600; margin-bottom: 4px; }
.pay-reason { margin-bottom: 6px; }
.pay-shape, .pay-where { color: var(--body-text-color-subdued, #666); font-size: 12px; }
.pay-costs { margin: 6px 0; font-variant-numeric: tabular-nums; }
.pay-panel tr.pay-own td { font-weight: 600; }
.pay-empty { color: var(--body-text-color-subdued, #666); }
#replay-buttons button { border: 1px solid var(--border-color-primary, #ccc); background: var(--button-secondary-background-fill, #f3f4f6); }
"""
CSS += r"""
/* the text view: only what the target emitted (rejected drafts stay in each correction's hover) */
body.speclens-text-view .text-panel del.tok-rej, body.speclens-text-view .legend .tok-rej { display: none; }
body.speclens-text-view .tok-acc { background: rgba(15,157,88,.10); border-bottom-width: 1px; }
body.speclens-text-view .tok-bonus { background: rgba(26,115,232,.08); }
/* vocabulary miss: the target token lay outside I_t (no draft could propose it) */
.tok-bonus.tok-vmiss { background: rgba(161,66,244,.22); border-bottom: 3px double #a142f4; }
body.speclens-text-view .tok-bonus.tok-vmiss { background: rgba(161,66,244,.22); }
.tok-acc.tok-ctx { border-bottom: 2px dashed #0b7a43; background: rgba(15,157,88,.30); }
.summary-note { margin-top: 4px; font-size: 12.5px; padding: 3px 8px; border-radius: 6px;
  background: rgba(249,171,0,.12); border: 1px solid rgba(249,171,0,.5); }
#text-view { margin: 0 0 2px 0; }
#text-view label { padding: 2px 10px !important; font-size: 12.5px; }
#header p { margin: 0; }

@media (max-width: 640px) {
  #run-main { flex-direction: column-reverse !important; }
  #header p { display: none; }
  .cards { grid-template-columns: repeat(4, 1fr); gap: 4px; }
  .card { padding: 3px 6px; }
  .card-v { font-size: 15px; }
  .card-k { font-size: 10.5px; line-height: 1.2; }
  .text-scroll { max-height: 136px; padding: 6px 8px; }
  .summary-footer { font-size: 11.5px; margin-top: 3px; }
  .source-note .hint, .legend-note, .legend .tok-prompt, .legend .tok-ar { display: none; }
  .source-note, .measured { font-size: 11px; line-height: 1.35; }
  .legend { margin-top: 4px; gap: 3px 6px; font-size: 11px; }
  #coverage-plot { zoom: .76; }
  .summary-note { font-size: 11px; padding: 1px 6px; margin-top: 2px; line-height: 1.3; }
  #run-view { gap: 6px !important; }
  #header h1 { font-size: 22px !important; margin: 0 !important; line-height: 1.2 !important; }
  .summary-footer .runtime { display: none; }
  .legend { font-size: 10.5px; }
  .legend .tok { padding: 0 2px; }
  #text-view label { padding: 0 8px !important; }
  #pay-panel, #try-pair { order: 1; }  /* on a phone: below the text and its coverage */
}
"""
