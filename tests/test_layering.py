"""The module graph, read from the source (every import, lazy ones included), against the layer table of
docs/architecture.md: each module imports only its own layer and the layers its row names; no import cycle."""
import fnmatch
import re

import pytest

from imports import ROOT, cycles, external_imports, graph, project_imports

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def layer_table(text: str) -> list:
    """[(layer, [module patterns], {layers it may import})] from the table after the `layers:` marker."""
    rows, started = [], False
    for line in text[text.index("<!-- layers:"):].splitlines()[1:]:
        if not line.startswith("|"):
            if started:
                break
            continue
        started = True
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in ("layer", "---") or set(cells[0]) <= {"-"}:
            continue
        pats = re.findall(r"`([^`]+)`", cells[1])
        rows.append((cells[0], pats, {c.strip() for c in cells[2].split(",") if c.strip()}))
    return rows


LAYERS = layer_table(ARCHITECTURE.read_text())


def project_modules() -> list:
    mods = []
    for path in [*ROOT.glob("core/**/*.py"), *ROOT.glob("ui/*.py"), *ROOT.glob("viz/*.py"), ROOT / "app.py",
                 *ROOT.glob("bench/**/*.py"), *ROOT.glob("tools/**/*.py")]:
        if path.name == "__init__.py" and not path.read_text().strip():
            continue  # an empty package file: no code, no imports
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        mods.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(mods)


MODULES = project_modules()


def layer_of(module: str) -> str | None:
    for name, pats, _ in LAYERS:
        if any(module == p.removesuffix(".*") or fnmatch.fnmatchcase(module, p) for p in pats):
            return name
    return None


def allowed(layer: str) -> set:
    return next(ok for name, _, ok in LAYERS if name == layer) | {layer}


def test_the_layer_table_is_read_from_the_architecture_doc():
    names = [name for name, _, _ in LAYERS]
    assert {"web door", "ui", "experiments", "pipeline", "decoding", "runtime", "kernels", "trace", "viz"} <= set(names)
    assert all(ok <= set(names) for _, _, ok in LAYERS)  # every layer a row may import is itself a row


def test_every_module_belongs_to_a_layer():
    assert [m for m in MODULES if layer_of(m) is None] == []


@pytest.mark.parametrize("module", MODULES)
def test_a_module_imports_only_the_layers_its_row_allows(module):
    ok = allowed(layer_of(module))
    assert {n: layer_of(n) for n in project_imports(module) if layer_of(n) not in ok} == {}


def test_the_project_has_no_import_cycle():
    assert cycles(graph(MODULES)) == []


def test_core_never_imports_viz_below_the_command_line_door():
    door = {m for m in MODULES if layer_of(m) == "command-line door"}
    assert [m for m in MODULES if m.startswith("core.") and m not in door
            and any(n.startswith("viz") for n in project_imports(m))] == []


OUTSIDE = ("bench", "tools")  # the benchmarks and the tools: they import the product, never the other way


def test_no_module_of_the_product_imports_the_benchmarks_or_tools():
    product = [m for m in MODULES if m.split(".")[0] not in OUTSIDE]
    assert product and {m for m in MODULES if m.split(".")[0] in OUTSIDE}
    assert {m: sorted(n for n in project_imports(m) if n.split(".")[0] in OUTSIDE)
            for m in product if any(n.split(".")[0] in OUTSIDE for n in project_imports(m))} == {}


def test_kernels_import_nothing_above_them():
    kernels = [m for m in MODULES if layer_of(m) == "kernels"]
    assert kernels and all(layer_of(n) in ("kernels", "errors", "paths") for m in kernels for n in project_imports(m))


def test_core_never_imports_gradio():
    assert [m for m in MODULES if m.startswith("core.") and "gradio" in external_imports(m)] == []


def test_viz_imports_no_torch_and_no_core():
    viz = [m for m in MODULES if m.startswith("viz")]
    assert [m for m in viz if "torch" in external_imports(m) or any(n.startswith("core") for n in project_imports(m))] == []


def test_the_layer_check_catches_a_forbidden_import():
    # the kernels may not import the engine: a row that did would show up here
    assert "decoding" not in allowed("kernels") and layer_of("core.decoding.engine") == "decoding"


def test_the_import_reader_sees_imports_inside_functions():
    # core.args imports core.pipeline only inside pipeline_from
    assert "core.pipeline" in project_imports("core.args")


def test_the_cycle_finder_reports_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
