#!/usr/bin/env python3
"""Train an MTP layer (mtp.0.*) for the shipped model, on the frozen main model.

The main model is models/dsv4-tiny as stored (dequantized from its files), frozen.
The MTP layer is DeepSeek-V4's (dsv4.md §2.7, the same module as the oracle of
tools/gen_dsv4_mtp_fixtures.py): e = enorm(embed(t[r+1])), x = e_proj(e) +
h_proj(hnorm(X[r])) over the main model's streams before hc_head, one
sliding-window score-routed block, its own hc_head and norm, the shared
embedding and head (frozen). The loss is the next-next token:
row r predicts t[r+2]. Data: the shipped model's training corpus
(tools/shipped_corpus.py), random crops.
Init: the block copies the main model's layer 1 (a sliding-window layer),
h_proj = identity, e_proj small random, hc_head and norm from the main model.

Reports held-out (models/dsv4-tiny/heldout.txt) first-draft agreement: how often
the MTP's argmax equals the main model's argmax for the same position. That is
the greedy acceptance of draft 1 under teacher forcing.
Writes a copy of the shipped model with the layer, stored like the rest
(FP8 block-128 projections, MXFP4 experts, BF16 norms), to --out.

Usage: /work/venv-torch/bin/python tools/train_shipped_mtp.py --out /work/artifacts/dsv4-tiny-mtp --steps 300

The layer committed in models/dsv4-tiny (docs/shipped_model.md "The MTP layer"):
  nice /work/venv-torch/bin/python tools/train_shipped_mtp.py --out DIR --steps 1100 --lr 1.5e-3 --threads 1
(583 s CPU; held-out agreement 0.056 -> 0.576), then DIR's model.safetensors,
config.json and mtp_training.json copied into models/dsv4-tiny.
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import dsv4_export as dx  # noqa: E402
import gen_dsv4_fixtures as gf  # noqa: E402
import gen_dsv4_mtp_fixtures as gm  # noqa: E402
import shipped_corpus  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
SHIPPED = REPO / "models" / "dsv4-tiny"


class Mtp(torch.nn.Module):
    def __init__(self, main, cfg: dict, tmp: pathlib.Path):
        super().__init__()
        sub = dict(cfg, num_hidden_layers=1, compress_ratios=[0], num_hash_layers=0)
        sub.pop("quantization_config", None)
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "config.json").write_text(json.dumps(sub))
        self.config, self.block_model = gf.build_hf(tmp)
        shutil.rmtree(tmp)
        src = {k: v for k, v in main.state_dict().items()}
        own = self.block_model.state_dict()
        init = {}
        for k in own:
            if k.startswith("model.layers.0."):
                m = "model.layers.1." + k[len("model.layers.0."):]
                if m in src and src[m].shape == own[k].shape:
                    init[k] = src[m]
                elif k.endswith("e_score_correction_bias"):
                    init[k] = torch.zeros_like(own[k])
            elif k in src:
                init[k] = src[k]  # embed, head, norm, hc_head
        missing = [k for k in own if k not in init]
        if missing:
            raise RuntimeError(f"no init for {missing}")
        self.block_model.load_state_dict(init, strict=True)
        for p in (self.block_model.model.embed_tokens.weight, self.block_model.lm_head.weight):
            p.requires_grad_(False)  # shared with the main model
        d, eps = self.config.hidden_size, self.config.rms_norm_eps
        self.e_proj = torch.nn.Linear(d, d, bias=False)
        self.h_proj = torch.nn.Linear(d, d, bias=False)
        with torch.no_grad():
            self.e_proj.weight.normal_(0, 0.5 / math.sqrt(d))
            self.h_proj.weight.copy_(torch.eye(d))
        self.enorm = gm.hf_mod.DeepseekV4RMSNorm(d, eps)
        self.hnorm = gm.hf_mod.DeepseekV4RMSNorm(d, eps)
        self._x = None
        self.block_model.model.layers[0].register_forward_pre_hook(lambda mod, args: (self._x,) + tuple(args[1:]))

    def forward(self, streams, next_ids):
        """streams [B, S, N, D], next_ids [B, S] -> logits [B, S, V]."""
        e = self.enorm(self.block_model.model.embed_tokens(next_ids))
        self._x = (self.e_proj(e).unsqueeze(-2) + self.h_proj(self.hnorm(streams))).contiguous()
        return self.block_model(next_ids, use_cache=False).logits.float()

    def official_tensors(self) -> dict[str, np.ndarray]:
        sd = {k: v.detach().float().numpy() for k, v in self.block_model.state_dict().items()
              if k.startswith("model.layers.0.")}
        off = dx.hf_to_official(sd, self.config.moe_intermediate_size)
        out = {"mtp.0." + k[len("layers.0."):]: v for k, v in off.items()}
        out["mtp.0.e_proj.weight"] = self.e_proj.weight.detach().numpy()
        out["mtp.0.h_proj.weight"] = self.h_proj.weight.detach().numpy()
        out["mtp.0.enorm.weight"] = self.enorm.weight.detach().numpy()
        out["mtp.0.hnorm.weight"] = self.hnorm.weight.detach().numpy()
        out["mtp.0.norm.weight"] = self.block_model.model.norm.weight.detach().numpy()
        hc = self.block_model.model.hc_head
        out["mtp.0.hc_head_fn"] = hc.hc_fn.detach().numpy()
        out["mtp.0.hc_head_base"] = hc.hc_base.detach().numpy()
        out["mtp.0.hc_head_scale"] = hc.hc_scale.detach().numpy()
        return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def streams_of(main, ids: torch.Tensor) -> torch.Tensor:
    grabbed = {}
    h = main.model.hc_head.register_forward_pre_hook(lambda mod, args: grabbed.setdefault("x", args[0].detach()))
    with torch.no_grad():
        logits = main(ids, use_cache=False).logits.float()
    h.remove()
    return grabbed["x"], logits


def agreement(main, mtp, ids: torch.Tensor, seq_len: int) -> tuple[float, int]:
    """Held-out: fraction of rows r where argmax MTP(X[r], t[r+1]) == argmax main(t[..r+1])."""
    agree = total = 0
    with torch.no_grad():
        for s in range(0, len(ids) - seq_len - 1, seq_len):
            win = ids[s: s + seq_len + 1].unsqueeze(0)
            x, logits = streams_of(main, win)
            m = mtp(x[:, :-1], win[:, 1:])
            agree += int((m.argmax(-1) == logits[:, 1:].argmax(-1)).sum())
            total += m.shape[1]
    return agree / max(total, 1), total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--corpus-cache", type=pathlib.Path, default=pathlib.Path("/work/artifacts/shakespeare_cache"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    # The main model only: a layer already stored there (the committed one) is retrained from scratch.
    stored = {k: v for k, v in gm.read_stored(SHIPPED).items() if not k.startswith("mtp.")}
    deq = dx.dequantize_checkpoint(stored)
    _, main_model = gm.load_main(SHIPPED, deq)
    for p in main_model.parameters():
        p.requires_grad_(False)
    cfg = json.loads((SHIPPED / "config.json").read_text())
    mtp = Mtp(main_model, cfg, args.out.parent / "_mtp_train_tmp")

    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(SHIPPED / "tokenizer.json"))
    corpus = shipped_corpus.load_corpus(args.corpus_cache)
    train = []
    for _, text in corpus.train:
        train += [0] + tok.encode(text, add_special_tokens=False).ids + [1]
    train = torch.tensor(train, dtype=torch.long)
    held = torch.tensor([0] + tok.encode((SHIPPED / "heldout.txt").read_text(), add_special_tokens=False).ids)
    a0, n0 = agreement(main_model, mtp, held, args.seq_len)
    print(f"tokens: train {len(train)}, held-out {len(held)}; agreement before training {a0:.3f} over {n0} rows",
          flush=True)

    params = [p for p in mtp.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    gen = torch.Generator().manual_seed(args.seed)
    t0 = time.time()
    L = args.seq_len
    for step in range(args.steps):
        lr = args.lr * min(1.0, (step + 1) / 20) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train) - L - 2, (args.batch,), generator=gen)
        crops = torch.stack([train[s: s + L + 2] for s in starts])    # [B, L + 2]
        x, _ = streams_of(main_model, crops[:, :L + 1])                # X[0 .. L]
        logits = mtp(x[:, :L], crops[:, 1:L + 1])                      # rows 0 .. L-1
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), crops[:, 2:L + 2].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 25 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.4f} lr {lr:.2e} {time.time() - t0:.0f} s", flush=True)
    a1, n1 = agreement(main_model, mtp, held, args.seq_len)
    print(f"held-out first-draft agreement after training: {a1:.3f} over {n1} rows", flush=True)

    # The shipped model plus the layer, stored like the rest.
    mtp_stored = dx.quantize_checkpoint(mtp.official_tensors(), "stock", "fp4", None)
    out = args.out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for f in SHIPPED.iterdir():
        if f.is_file() and f.suffix != ".safetensors" and f.name != "config.json":
            shutil.copy(f, out / f.name)
    cfg["num_nextn_predict_layers"] = 1
    cfg["compress_ratios"] = list(cfg["compress_ratios"][: cfg["num_hidden_layers"]]) + [0]
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    dx.write_checkpoint(out, {**stored, **mtp_stored}, 1)
    (out / "mtp_training.json").write_text(json.dumps({
        "generator": "tools/train_shipped_mtp.py", "steps": args.steps, "batch": args.batch, "seq_len": L,
        "lr": args.lr, "seed": args.seed, "final_loss": loss.item(), "heldout_agreement_before": a0,
        "heldout_agreement_after": a1, "heldout_rows": n1}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
