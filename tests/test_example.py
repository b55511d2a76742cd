"""The shipped example traces are what the app runs today (python -m core example regenerates them)."""
import pytest

from core.examples import DEFAULT_MODEL, EXAMPLES, app_config, default_prompt, head_file, sha256_of
from core.trace.live import lossless_verdict
from core.trace.file import load_trace

STALE = "stale example: regenerate with python -m core example"


@pytest.mark.parametrize("pair", list(EXAMPLES), ids=lambda p: p[1])
def test_example_config_prompt_and_head_are_the_apps(pair):
    model_id, draft = pair
    m = load_trace(EXAMPLES[pair])["meta"]
    assert m["model"] == model_id and m["pair"] == draft and m["prompt"] == default_prompt(), STALE
    assert m["cfg"] == app_config(m["method"], model_id=model_id).to_dict(), STALE
    assert m["head_sha256"] == sha256_of(head_file(model_id, draft)), STALE


@pytest.mark.parametrize("pair", list(EXAMPLES), ids=lambda p: p[1])
def test_example_ships_its_plain_decoding_baseline_and_where_it_was_measured(pair):
    t = load_trace(EXAMPLES[pair])
    m = t["meta"]
    assert lossless_verdict(t, m["baseline"])["identical"]
    assert m["baseline"]["summary"]["tokens_per_s"] > 0 and m["summary"]["tokens_per_s"] > 0
    assert {"host", "cpu", "threads", "date", "note"} <= set(m["measured"])


def test_example_runtime_is_the_one_the_app_loads(default_pipeline):
    m = load_trace(EXAMPLES[(DEFAULT_MODEL, "auto")])["meta"]
    assert m["runtime"] == default_pipeline.runtime_name and m["draft"] == default_pipeline.draft_name, STALE


def test_the_apps_untouched_settings_are_the_example_config():
    from core.examples import APP_MAX_NEW_TOKENS
    from ui.runs import default_settings, make_config
    assert make_config("nanospec", *default_settings(), APP_MAX_NEW_TOKENS, 0.0) == app_config()
