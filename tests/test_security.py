"""Security and limits of what a web user can reach: remote code only when the operator opts in, only listed models,
uploads as size-capped server-side data copies, server-side bounds on every setting, capped session state."""
import inspect

import pytest

from core import models
from core.models import load
from core.errors import SpecError


@pytest.fixture
def hub_reachable(monkeypatch):
    monkeypatch.setattr(load, "hub_unreachable", lambda model_id: False)


@pytest.mark.parametrize("env, expected", [(None, False), ("0", False), ("true", False), ("yes", False),
                                           ("1", True)])
def test_remote_code_is_trusted_only_when_the_operator_sets_exactly_1(hub_reachable, monkeypatch, env, expected):
    if env is None:
        monkeypatch.delenv("SPECLENS_TRUST_REMOTE_CODE", raising=False)
    else:
        monkeypatch.setenv("SPECLENS_TRUST_REMOTE_CODE", env)
    assert models.resolve_source("some-org/some-model") == ("some-org/some-model", {"trust_remote_code": expected})


def test_load_model_passes_trust_remote_code_false_to_both_loaders(hub_reachable, monkeypatch):
    import transformers
    monkeypatch.delenv("SPECLENS_TRUST_REMOTE_CODE", raising=False)
    seen = []

    class Recorder:
        @staticmethod
        def from_pretrained(source, **kw):
            seen.append(kw)
            return FakeModel()
    monkeypatch.setattr(transformers, "AutoTokenizer", Recorder)
    monkeypatch.setattr(transformers, "AutoModelForCausalLM", Recorder)
    models.load_model("some-org/some-model", device="cpu")
    assert len(seen) == 2 and all(kw["trust_remote_code"] is False for kw in seen)


class FakeModel:
    def to(self, device):
        return self

    def eval(self):
        return self


def test_offline_aliases_and_local_dirs_never_ask_for_remote_code(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_TRUST_REMOTE_CODE", "1")
    monkeypatch.setattr(load, "cached_checkpoint", lambda name: tmp_path)
    assert models.resolve_source("smollm2-135m-instruct")[1] == {}
    assert models.resolve_source(str(tmp_path))[1] == {}


@pytest.mark.parametrize("key", ["/etc/passwd|self", "https://evil.example/m|auto", "smollm2-135m-instruct|/tmp/x",
                                 "../../models|self", "smollm2-135m-instruct", "evil-org/evil-model|auto", ""])
def test_the_app_opens_only_listed_models(key):
    from ui.models import parse_model_key
    with pytest.raises(SpecError, match="unknown model choice"):
        parse_model_key(key)


def test_the_api_endpoint_takes_no_model_path_or_url():
    from ui.api import generate
    assert list(inspect.signature(generate).parameters) == ["prompt", "method", "max_new_tokens"]


UPLOAD_KINDS = ("File", "UploadButton", "Image", "ImageEditor", "Audio", "Video", "Gallery", "Model3D",
                "MultimodalTextbox")


DATA_FILE_TYPES = {".jsonl", ".json", ".csv", ".txt"}  # read by our own parsers (core/prompts.py), never executed
DATA_FILE_TYPES |= {".pt", ".safetensors"}  # token maps: torch.load(weights_only=True) / safetensors (core/maps/formats.py)


def upload_components(demo) -> list:
    """Components a browser can send a file through: upload kinds that are interactive, or that Gradio makes
    interactive (interactive=None) because an event takes them as an input."""
    import gradio as gr
    inputs = {b._id for fn in demo.fns.values() for b in fn.inputs}
    kinds = tuple(getattr(gr, k) for k in UPLOAD_KINDS if hasattr(gr, k))
    return [b for b in demo.blocks.values() if isinstance(b, kinds)
            and (b.interactive or (b.interactive is None and b._id in inputs))]


def test_the_web_ui_accepts_uploads_only_as_data_files_in_server_side_copies():
    """The rule: uploads are allowed, size-limited (next test) and parsed as data: each upload component takes
    only data file types and hands its handler gradio's server-side temp copy (type="filepath")."""
    import app
    uploads = upload_components(app.build_demo(hub=False))
    assert uploads, "the Paper tab's prompt file upload was not found"
    for b in uploads:
        assert b.file_types and set(b.file_types) <= DATA_FILE_TYPES, (b.label, b.file_types)
        assert b.type == "filepath", b.label


def test_the_server_limits_upload_size():
    import app
    seen = {}

    class Demo:
        def queue(self, **kw):
            return self

        def launch(self, **kw):
            seen.update(kw)
    app.launch(Demo(), port=1, host="127.0.0.1")
    from gradio.utils import _parse_file_size
    assert 0 < _parse_file_size(seen["max_file_size"]) <= 10 * 1024 * 1024


@pytest.mark.parametrize("settings, needle", [
    (dict(max_new=513), "max new tokens"), (dict(max_new=-1), "max_new_tokens"),
    (dict(tree_size=129), "tree_size"), (dict(tree_size=0), "tree_size"),
    (dict(w_max=262145), "w_max"), (dict(w_max=0), "w_max"), (dict(depth=17), "depth"),
    (dict(temperature=float("nan")), "temperature"), (dict(method="../../etc"), "method"),
])
def test_the_app_rejects_settings_outside_the_server_bounds(settings, needle):
    from ui.runs import make_config
    args = dict(method="nanospec", w_max=3072, k_pre=3, k_ver=3, fr_size=8192, rank=0, depth=4, top_k=2,
                tree_size=10, max_new=64, temperature=0.0) | settings
    with pytest.raises(SpecError, match=needle):
        make_config(**args)


def test_the_app_rejects_an_overlong_prompt_with_its_length():
    from ui.runs import check_prompt
    with pytest.raises(SpecError, match="too long .*8001 characters"):
        check_prompt("x" * 8001)


@pytest.mark.parametrize("prompt, method, n, needle", [
    ("x" * 9000, "nanospec", 8, "too long"), ("hi", "nanospec", 10**9, "max new tokens"),
    ("hi", "nanospec", -5, "max_new_tokens"), ("hi", "C:/evil", 8, "method must be one of"),
])
def test_the_api_endpoint_turns_bad_input_into_a_message(default_pipeline, prompt, method, n, needle):
    import gradio as gr

    from ui.api import generate
    with pytest.raises(gr.Error, match=needle):
        generate(prompt, method, n)


@pytest.mark.parametrize("n", ["abc", None, float("nan")])
def test_the_api_endpoint_turns_a_non_number_token_count_into_a_message(default_pipeline, n):
    import gradio as gr

    from ui.api import generate
    with pytest.raises(gr.Error, match="max"):
        generate("hi", "ar", n)


def test_a_sessions_baselines_are_capped():
    from ui.runs import remember_baseline
    kept = {}
    for i in range(10):
        kept = remember_baseline(kept, f"k{i}", {"meta": {}})
    assert list(kept) == ["k6", "k7", "k8", "k9"]
