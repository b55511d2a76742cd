"""The web app's handlers; app.py lays out the components and wires their events to these functions.

Every handler returns (or yields) {component name: value}: app.py maps the names onto its components, and a
component a handler does not name keeps its value. Handlers may use gradio (updates, warnings, the request);
the engine behind them (core/) never does.
"""
