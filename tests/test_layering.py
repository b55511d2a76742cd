"""The module graph, read from the source (every import, lazy ones included): core/ has no import cycle,
nothing below the entry points imports an experiment or an entry point, and the web app (app.py, its
handlers in ui/) sits on top: nothing in core/ or viz/ imports it."""
import pytest

from imports import cycles, external_imports, graph, modules_under, project_imports

PACKAGES = ("core", "core.spec", "core.runtime", "core.kernels", "core.experiments", "core.train", "core.maps")
CORE = [m for p in PACKAGES for m in modules_under(p)]
# experiments, training and entry points: `python -m core ...` subcommands and what only they use
ENTRIES = {"core.__main__", "core.cli", "core.kernels.bench"} | {
    m for m in CORE if m.startswith(("core.experiments.", "core.train."))}
UI = modules_under("ui")  # the app's handlers; app.py is the layout on top of them


def test_core_has_no_import_cycle():
    assert cycles(graph(CORE)) == []


@pytest.mark.parametrize("module", sorted(set(CORE) - ENTRIES))
def test_the_engine_and_runtime_import_no_experiment_or_entry_point(module):
    assert project_imports(module) & ENTRIES == set()


def test_core_never_imports_gradio():
    assert [m for m in CORE if "gradio" in external_imports(m)] == []


def test_core_and_viz_never_import_the_web_app():
    app = set(UI) | {"app"}
    assert [m for m in CORE + modules_under("viz") if project_imports(m) & app] == []


def test_the_handlers_have_no_import_cycle_and_never_import_the_layout():
    assert cycles(graph(UI)) == []
    assert [m for m in UI if "app" in project_imports(m)] == []


def test_the_import_reader_sees_imports_inside_functions():
    # core.cli imports core.pipeline only inside pipeline_from
    assert "core.pipeline" in project_imports("core.cli")


def test_the_cycle_finder_reports_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
