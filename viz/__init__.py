"""SpecLens views: pure functions from trace dicts (StepRecord.to_dict()) to HTML strings and Plotly figures.

Nothing here imports torch, gradio or model code: a trace is {"meta": {...}, "records": [dict, ...]}.
"""
