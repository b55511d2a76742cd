"""Training (train-eagle, train-slim and their shared skeleton core/train/loop.py) on tiny random models:
the losses fall, the schedule, the CLI from the config dataclasses, resumed runs equal uninterrupted ones,
and the training card's tau is the engine's."""
import random

import pytest
import torch

from core.train import card as tc
from core.train import data as td
from core.train import eagle as te
from core.decoding.eagle import EagleConfig, EagleHead, init_from_target
from core.errors import SpecError
from tools.tiny import tiny_model, tiny_tokenizer
from core.train.loop import due, load_checkpoint, lr_at, parse_config, save_checkpoint
from core.train.slim import SlimConfig, held_out, svd_init, train_factors, whitened_svd

pytestmark = pytest.mark.usefixtures("single_thread")  # tiny matmuls: one thread (conftest)

TEMPLATE = "{% for m in messages %}<s> {{ m['content'] }} </s> {% endfor %}{% if add_generation_prompt %}<s>{% endif %}"


def tiny(seed=0):
    torch.manual_seed(seed)
    model = tiny_model(seed)
    head = init_from_target(EagleHead(model.config, EagleConfig()), model).attach(model)
    return model, head


def target_features(model, ids):
    grab = []
    h = model.model.norm.register_forward_pre_hook(lambda m, a: grab.append(a[0]))
    with torch.no_grad():
        model.model(input_ids=ids)
    h.remove()
    return grab[0]


# ---------------------------------------------------------------- the skeleton

def test_lr_warms_up_linearly_then_falls_by_cosine_to_a_tenth():
    assert lr_at(0, 100, 1.0, 10) == 0.1 and lr_at(9, 100, 1.0, 10) == 1.0
    assert lr_at(55, 100, 1.0, 10) == pytest.approx(0.55)  # half way down the cosine: (0.1 + 1) / 2
    assert abs(lr_at(100, 100, 1.0, 10) - 0.1) < 1e-9
    assert all(lr_at(s, 100, 1.0, 10) >= lr_at(s + 1, 100, 1.0, 10) for s in range(10, 100))


def test_lr_follows_the_time_budget_when_it_runs_ahead_of_the_steps():
    assert lr_at(20, 100, 1.0, 10, frac=0.5) == pytest.approx(0.55)
    assert lr_at(20, 100, 1.0, 10, frac=1.0) == pytest.approx(0.1)
    assert lr_at(90, 100, 1.0, 10, frac=0.5) == lr_at(90, 100, 1.0, 10)  # the steps lead: they set it


def test_train_eagle_warmup_is_a_tenth_of_the_steps_up_to_50():
    assert te.warmup_steps(te.TrainConfig(steps=100)) == 11 and te.warmup_steps(te.TrainConfig(steps=2000)) == 50


def test_periodic_actions_run_every_n_steps_and_at_the_last():
    assert [s for s in range(1, 8) if due(s, 3, 7)] == [3, 6, 7]
    assert [s for s in range(1, 8) if due(s, 0, 7)] == [7]


def test_the_cli_is_the_config_dataclass():
    tcfg = parse_config(te.TrainConfig, ["--steps", "5", "--amp", "false", "--cache-only", "--vocab-subset", "0"], "t")
    assert (tcfg.steps, tcfg.amp, tcfg.cache_only, tcfg.vocab_subset, tcfg.final_norm) == (5, False, True, 0, True)
    slim = parse_config(SlimConfig, ["--head", "H", "--warmup", "7", "--ce-w", "0.5"], "s")
    assert (slim.head, slim.warmup, slim.ce_w, slim.out, slim.steps) == ("H", 7, 0.5, None, 400)


@pytest.mark.parametrize("argv", [[], ["--head", "H", "--steps", "x"]])
def test_the_cli_rejects_a_missing_required_flag_or_a_bad_value(argv):
    with pytest.raises(SystemExit):
        parse_config(SlimConfig, argv, "s")


def test_a_bool_flag_rejects_a_misspelt_value():
    with pytest.raises(SystemExit):
        parse_config(te.TrainConfig, ["--amp", "flase"], "t")


def test_a_checkpoint_with_other_settings_is_refused(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, {"step": 3, "settings": {"rank": 4}})
    assert load_checkpoint(path, {"rank": 4})["step"] == 3 and load_checkpoint(tmp_path / "none.pt") is None
    with pytest.raises(SpecError):
        load_checkpoint(path, {"rank": 5})


# ---------------------------------------------------------------- train-eagle

def test_trainer_loss_falls():
    model, head = tiny()
    g = torch.Generator().manual_seed(0)
    X = torch.randint(3, 512, (4, 32), generator=g)
    Fe = target_features(model, X)
    valid = torch.ones_like(X, dtype=torch.bool)
    W = model.lm_head.weight.detach()
    sub = te.token_subset([X.view(-1)], W.shape[0], 0)
    tcfg = te.TrainConfig(depth=2)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    losses, first = [], None
    for _ in range(30):
        loss, st = te.draft_losses(head, W[sub], X, Fe, valid, float(Fe.pow(2).mean().sqrt()), tcfg)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        first = first or st
    assert set(st) == {"f1", "t1", "a1", "f2", "t2", "a2"}
    # the token CE has a floor (the entropy of a random target, ~log V): check the total and the feature loss
    assert losses[-1] < losses[0] - 0.3
    assert st["f1"] < 0.7 * first["f1"] and st["a1"] >= first["a1"]


def test_hard_label_term_adds_the_draft_ce_at_the_target_argmax():
    model, head = tiny()
    X = torch.randint(3, 512, (2, 16), generator=torch.Generator().manual_seed(1))
    Fe = target_features(model, X)
    valid = torch.ones_like(X, dtype=torch.bool)
    W, sigma = model.lm_head.weight.detach(), float(Fe.pow(2).mean().sqrt())
    soft, _ = te.draft_losses(head, W, X, Fe, valid, sigma, te.TrainConfig(depth=1))
    both, _ = te.draft_losses(head, W, X, Fe, valid, sigma, te.TrainConfig(depth=1, hard_w=0.5))
    out, _ = head(head.target_in(Fe)[:, :-1], X[:, 1:], torch.arange(1, 16).expand(2, 15))
    logq = torch.log_softmax(head.head_in(out) @ W.T, -1)
    best = (head.head_in(head.target_in(Fe)[:, 1:]) @ W.T).argmax(-1, keepdim=True)
    hard = -logq.gather(-1, best).mean()
    assert torch.allclose(both - soft, 0.5 * hard, rtol=1e-4, atol=1e-5)


def test_prompt_targets_weighted_by_response_start():
    marker = [1, 2, 3]
    x = torch.tensor([5, 1, 2, 3, 9, 1, 2, 3, 7, 8])
    assert td.response_start(x, marker) == 8 and td.response_start(x[:3], marker) == 0  # the last marker; none -> 0
    # f_t predicts x_{t+1}: targets t >= start - 1 predict response tokens
    assert te.target_weights(10, 8, 0.5).tolist() == [0.5] * 7 + [1.0] * 3
    tcfg = te.TrainConfig(batch=3, seq_len=16, prompt_w=0.0)
    _, _, w = te.sample_batch([x], [torch.zeros(10, 4)], tcfg, random.Random(0), [8])
    assert w.tolist() == [[0.0] * 7 + [1.0] * 3] * 3


def test_the_token_subset_always_holds_the_batchs_own_ids_once():
    S = te.with_batch_ids(torch.tensor([1, 5, 9]), torch.tensor([[5, 7, 7], [300, 1, 0]]))
    assert sorted(S.tolist()) == [0, 1, 5, 7, 9, 300] and S[:3].tolist() == [1, 5, 9]


def words(rng, n):
    return " ".join(f"w{rng.randrange(3, 512)}" for _ in range(n))


def eagle_run(out, **kw):
    """A train-eagle config for the tiny model with a teacher-forced feature cache in `out`."""
    model, tok = tiny_model(0), tiny_tokenizer(chat_template=TEMPLATE)
    opts = dict(target="tiny", out=str(out), steps=6, batch=2, seq_len=16, depth=2, vocab_subset=0, negatives=0,
                amp=False, eval_prompts=0, ckpt_min=1e9, ckpt_every=2, log_every=1, max_prompt=24, max_new=24,
                shard_size=4, gen_batch=4)
    tcfg = te.TrainConfig(**opts | kw)
    rng = random.Random(0)
    torch.manual_seed(tcfg.seed)  # as main does: the head's fc init draws from it
    td.build_cache(model, tok, tcfg, [(words(rng, 6), words(rng, 10)) for _ in range(6)])
    return model, tok, tcfg


def test_eagle_resume_equals_uninterrupted(tmp_path, monkeypatch):
    model, tok, tcfg = eagle_run(tmp_path / "a")
    te.train(model, tok, tcfg)
    whole = load_checkpoint(tmp_path / "a" / "ckpt.pt")

    model, tok, tcfg = eagle_run(tmp_path / "b")
    real = te.logger

    def crash_at_5(tcfg):
        log = real(tcfg)

        def crash(msg):
            if msg.startswith("step 5/"):
                raise KeyboardInterrupt  # killed between checkpoints: the rerun redoes step 5
            log(msg)
        return crash
    monkeypatch.setattr(te, "logger", crash_at_5)
    with pytest.raises(KeyboardInterrupt):
        te.train(model, tok, tcfg)
    monkeypatch.setattr(te, "logger", real)
    assert load_checkpoint(tmp_path / "b" / "ckpt.pt")["step"] == 4
    te.train(model, tok, tcfg)
    resumed = load_checkpoint(tmp_path / "b" / "ckpt.pt")
    assert "resumed at step 4" in (tmp_path / "b" / "progress.log").read_text()
    assert resumed["step"] == whole["step"] == 6
    assert all(torch.equal(whole["head"][k], resumed["head"][k]) for k in whole["head"])
    assert resumed["run"] == whole["run"] and resumed["hist"] == whole["hist"]
    assert all(torch.equal(a, b) for a, b in zip(whole["opt"]["state"][0].values(), resumed["opt"]["state"][0].values()))


def test_training_follows_the_shards_a_harvest_writes_beside_it(tmp_path):
    model, tok, tcfg = eagle_run(tmp_path / "a", extra_cache=str(tmp_path / "b"))
    ids, feats, loaded = td.load_cache(td.cache_dirs(tcfg))
    starts, before = [0] * len(ids), len(ids)
    assert te.follow_cache(td.cache_dirs(tcfg), ids, feats, starts, loaded, [], lambda m: None) == 0
    (tmp_path / "b" / "cache").mkdir(parents=True)
    td.save_rows(tmp_path / "b" / "cache" / "shard_00000.pt", [(torch.arange(7, dtype=torch.int32), torch.zeros(7, 64))])
    assert te.follow_cache(td.cache_dirs(tcfg), ids, feats, starts, loaded, [], lambda m: None) == 7
    assert len(ids) == len(feats) == len(starts) == before + 1 and ids[-1].tolist() == list(range(7))
    assert te.follow_cache(td.cache_dirs(tcfg), ids, feats, starts, loaded, [], lambda m: None) == 0


def test_a_held_out_harvest_is_scored_beside_the_held_out_set_and_never_trained_on(tmp_path):
    model, tok, tcfg = eagle_run(tmp_path / "a", held_cache=str(tmp_path / "m"))
    (tmp_path / "m" / "cache").mkdir(parents=True)
    td.save_rows(tmp_path / "m" / "cache" / "shard_00000.pt", [(torch.arange(3, 12, dtype=torch.int32), torch.randn(9, 64))])
    te.train(model, tok, tcfg)
    log = (tmp_path / "a" / "progress.log").read_text()
    assert "train: 6 seqs" in log and " m1=" in log and " m2=" in log
    assert "m: the answers cached in" in (tmp_path / "a" / "training_card.md").read_text()


def test_a_held_out_harvest_that_is_also_trained_on_is_refused(tmp_path):
    model, tok, tcfg = eagle_run(tmp_path / "a", held_cache=str(tmp_path / "a"))
    with pytest.raises(SpecError, match="trained on too"):
        te.train(model, tok, tcfg)


def test_the_card_names_where_each_cache_came_from(tmp_path):
    import json
    (tmp_path / "h" / "cache").mkdir(parents=True)
    (tmp_path / "h" / "harvest.json").write_text(json.dumps({"settings": {"max_new": 256, "source": "magpie", "data": ""}}))
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "cache").symlink_to(tmp_path / "h" / "cache")  # a training dir sharing a harvest's cache
    line = tc.data_line(te.TrainConfig(out=str(tmp_path / "t"), data="c.jsonl"))
    assert line == "the target's greedy answers (<= 256 new tokens) to questions it sampled itself (Magpie) (core.train.harvest)"
    assert tc.data_line(te.TrainConfig(out=str(tmp_path / "x"), data="c.jsonl")) == "c.jsonl (teacher forcing on responses)"


def test_the_card_tau_is_the_engines_mean_accepted_length(tmp_path):
    from core.config import SpecConfig
    from core.trace.stats import summarize
    model, head = tiny(2)
    tok = tiny_tokenizer(chat_template=TEMPLATE)
    pipe = tc.card_pipeline(model, tok, head, "tiny")
    rng = random.Random(1)
    prompts = [words(rng, 5), words(rng, 7)]
    shapes = {"tree": {"shape": "tree", "depth": 3, "top_k": 2, "tree_size": 6}, "chain": {"shape": "chain", "gamma": 3}}
    acc = tc.engine_tau(pipe, prompts, shapes, max_new=12)
    for name, shape in shapes.items():
        cfg = SpecConfig(method="full", max_new_tokens=12, context="off", **shape)
        runs = [summarize(list(pipe.run(p, cfg))) for p in prompts]
        assert acc[name]["steps"] == sum(r["steps"] for r in runs)
        pooled = sum(r["mean_accept_len"] * r["steps"] for r in runs) / acc[name]["steps"]
        assert acc[name]["tau"] == pytest.approx(pooled, abs=1e-12)
    card = tmp_path / "card.md"
    tc.write_card(te.TrainConfig(eval_prompts=2), {"tokens": 1, "seqs": 1, "subset": 1, "sigma": 1.0, "final": {},
                                                    "steps": 0}, acc, card)
    assert f"| tree 3/2/6 | {acc['tree']['steps']} | {acc['tree']['tau']:.3f} |" in card.read_text()


# ---------------------------------------------------------------- train-slim

def slim_setting():
    g = torch.Generator().manual_seed(0)
    return torch.randn(256, 32, generator=g), torch.randn(1200, 32, generator=g)


def test_slim_factors_kl_falls():
    W, h = slim_setting()
    up, down, before, after = train_factors(W, h, 4, steps=60, batch=128, lr=1e-2, seed=0, log=lambda s: None)
    assert up.shape == (256, 4) and down.shape == (4, 32)
    assert after[0] < 0.9 * before[0]


def test_slim_top1_term_runs_and_kl_falls():
    W, h = slim_setting()
    _, _, before, after = train_factors(W, h, 4, steps=40, batch=128, lr=1e-2, seed=0, log=lambda s: None, ce_w=0.5)
    assert after[0] < before[0] and after[1] >= before[1]


def logit_error(W, up, down, h):
    return float(((h @ W.T - (h @ down.T) @ up.T) ** 2).mean())


def test_whitened_svd_is_the_plain_svd_on_white_inputs():
    W, _ = slim_setting()
    h = torch.linalg.qr(torch.randn(1024, 32, generator=torch.Generator().manual_seed(1)))[0] * 32  # E[h^T h] = I
    K, down = whitened_svd(W, h, 4)
    up_s, down_s = svd_init(W, 4)
    assert torch.allclose((W @ K.T) @ down, up_s @ down_s, atol=1e-4)


def test_whitened_svd_fits_the_logits_of_its_inputs_better_than_svd():
    W, h = slim_setting()
    h = h * torch.logspace(-1, 1, 32)  # inputs that use some directions far more than others
    K, down = whitened_svd(W, h, 4)
    assert logit_error(W, W @ K.T, down, h) < 0.8 * logit_error(W, *svd_init(W, 4), h)


def test_slim_tied_rows_train_and_stay_rows_of_w():
    W, h = slim_setting()
    up, down, before, after = train_factors(W, h, 4, steps=40, batch=128, lr=1e-2, seed=0, log=lambda s: None,
                                            rows="tied")
    assert after[0] < before[0]
    coef = torch.linalg.lstsq(W, up).solution  # W_up = W K^T lies in W's column space
    assert torch.allclose(W @ coef, up, atol=1e-4)


def test_tied_factors_are_stored_as_k_and_read_back_as_w_k_transposed(tmp_path):
    from safetensors import safe_open
    from core.pipeline import read_slim
    from core.train.slim import save_factors
    W, _ = slim_setting()
    K, down = torch.randn(4, W.shape[1]), torch.randn(4, W.shape[1])
    save_factors(tmp_path / "f.safetensors", None, down, K)
    up, d = read_slim(tmp_path / "f.safetensors", W)
    assert set(safe_open(str(tmp_path / "f.safetensors"), "pt").keys()) == {"K", "W_down"}
    torch.testing.assert_close(up, (W @ K.T).half().float())
    torch.testing.assert_close(d, down.half().float())


def test_slim_unknown_rows_is_a_clear_error():
    W, h = slim_setting()
    with pytest.raises(SpecError, match="--rows"):
        train_factors(W, h, 4, steps=1, batch=8, lr=1e-2, seed=0, log=lambda s: None, rows="shared")


def test_slim_tied_rows_refuse_free_row_init():
    W, h = slim_setting()
    with pytest.raises(SpecError, match="tied rows"):
        train_factors(W, h, 4, steps=1, batch=8, lr=1e-2, seed=0, log=lambda s: None, rows="tied",
                      init=svd_init(W, 4))


def test_held_out_recall_is_at_least_top1_agreement():
    W, h = slim_setting()
    kl, top1, recall = held_out(W, *svd_init(W, 4), h)
    assert 0 <= top1 <= recall <= 1 and kl > 0


@pytest.mark.parametrize("rows", ["free", "tied"])
def test_slim_resume_equals_uninterrupted(tmp_path, rows):
    W, h = slim_setting()
    kw = dict(steps=30, batch=64, lr=1e-2, seed=0, ckpt_every=10, log_every=5, eval_every=10, rows=rows)
    up, down, _, after = train_factors(W, h, 4, log=lambda s: None, ckpt=str(tmp_path / "a.pt"), **kw)

    def crash_at_25(msg):
        if msg.startswith("slim step 25/"):
            raise KeyboardInterrupt  # killed between checkpoints: the rerun redoes steps 21-25
    ckpt = str(tmp_path / "b.pt")
    with pytest.raises(KeyboardInterrupt):
        train_factors(W, h, 4, log=crash_at_25, ckpt=ckpt, **kw)
    assert torch.load(ckpt, weights_only=False)["state"]["step"] == 20
    logs = []
    up2, down2, _, after2 = train_factors(W, h, 4, log=logs.append, ckpt=ckpt, **kw)
    assert logs[0].startswith("slim resumed at step 20/30")
    assert torch.equal(up, up2) and torch.equal(down, down2) and after == after2


def test_slim_resume_refuses_other_settings(tmp_path):
    W, h = slim_setting()
    ckpt = str(tmp_path / "c.pt")
    train_factors(W, h, 4, 5, 64, 1e-2, 0, log=lambda s: None, ckpt=ckpt, settings={"rank": 4})
    with pytest.raises(SpecError):
        train_factors(W, h, 4, 10, 64, 1e-2, 0, log=lambda s: None, ckpt=ckpt, settings={"rank": 5})


def test_tau_only_without_a_saved_head_is_a_one_line_error(tmp_path, capsys):
    from core.cli import dispatch
    assert dispatch(["train-eagle", "--tau-only", "--init", str(tmp_path)]) == 2
    assert "--tau-only needs --init DIR holding eagle.safetensors" in capsys.readouterr().err


def test_the_trained_heads_card_reports_the_engines_tau(tmp_path):
    model, tok, tcfg = eagle_run(tmp_path, eval_prompts=1)
    te.train(model, tok, tcfg)
    head = te.new_head(model, tcfg)
    head.load_state_dict(load_checkpoint(tmp_path / "ckpt.pt")["head"])
    acc = tc.engine_tau(tc.card_pipeline(model, tok, head, tcfg.target), tc.eval_prompts(tcfg)[0])
    card = (tmp_path / "training_card.md").read_text()
    assert all(tc.tau_row(r) in card for r in acc.values()) and len(acc) == 2


def test_a_draft_models_slim_inputs_are_its_final_hidden_states_at_the_response_positions():
    from core.train.slim import model_inputs
    model, tok = tiny_model(), tiny_tokenizer()
    pairs = [("w5 w6", "w7 w8 w9"), ("w10", "w11 w12")]  # no chat template: prompt ids, then the response's
    h = model_inputs(model, tok, pairs, n_tokens=100, batch=2)
    ref = [model(torch.tensor([tok(p + " " + a)["input_ids"]]), output_hidden_states=True).hidden_states[-1][0]
           for p, a in pairs]
    starts = [len(tok(p)["input_ids"]) for p, _ in pairs]
    torch.testing.assert_close(h, torch.cat([r[s:] for r, s in zip(ref, starts)]), atol=1e-5, rtol=1e-5)
    assert h.shape == (5, 64)
