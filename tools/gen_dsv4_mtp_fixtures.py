#!/usr/bin/env python3
"""Oracle logits of DeepSeek-V4's MTP layer (mtp.0.*) for the tiny fixtures.

Transformers does not build the MTP block (dsv4.md §2.8 item 6), so this is a
torch reference written from the spec (dsv4.md §2.7, DeepSeek's official
MTPBlock):
    e  = enorm(embed(next_ids))                      [S, D]
    x  = hnorm(X)                                    [S, N, D]  X = the main model's streams before hc_head
    x  = e_proj(e).unsqueeze(-2) + h_proj(x)         [S, N, D]
    x  = Block(x)                                    a sliding-window, score-routed block
    logits = head(norm(hc_head(x)))                  the MTP's own hc_head and norm, the shared head
Everything that transformers does have is reused from it: the main model gives
X, captured as the input of its hc_head (= the last decoder layer's output;
checked below). `output_hidden_states` does NOT carry it: its N + 1 entries
are the embedding streams, the outputs of layers 0 .. N-2, and last the
final norm(hc_head(X)) [S, D] (transformers replaces the last layer's output
by last_hidden_state). And the MTP block is transformers'
own DeepseekV4DecoderLayer + DeepseekV4HyperHead + RMSNorm + lm_head, i.e. a
one-layer DeepseekV4ForCausalLM (layer type sliding_attention, mlp type moe)
loaded with the mtp.0.* weights, whose decoder layer gets x instead of the
embedding streams (a forward pre-hook).

It reads the weights of the committed fixtures (tests/fixtures/dsv4/<name>,
written by gen_dsv4_fixtures.py), dequantized from the stored bytes, and adds
only new files under <name>/expected/mtp/, so the main oracle files do not
change. Per fixture, for token sequences long enough to wrap the sliding
window several times:
  seq<i>.bin    f32 [n - 1][vocab]: row r = MTP logits at position r with the
                main streams of position r and token r + 1 (predicting r + 2);
  chain<i>.bin  f32 [k][vocab]: chained drafts after a prefix of P tokens: draft
                1 reads the main streams of P - 1 and token P, draft j + 1 the
                MTP's own output streams of draft j and draft j's argmax.
Each discrete choice (the MTP block's MoE top-k, a chain's argmax) is checked
for a safe margin; token sequences are redrawn (next seed) until it holds.

Usage: /work/venv-torch/bin/python tools/gen_dsv4_mtp_fixtures.py   (deterministic; gen_all.py runs it)
"""
from __future__ import annotations

import json
import math
import pathlib
import shutil
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import dsv4_export as dx  # noqa: E402
import gen_dsv4_fixtures as gf  # noqa: E402

from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hf_mod  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "dsv4"

# name -> (token sequence lengths, chain cases (sequence index, prefix P, drafts k), seed)
CASES = {
    "flash_tiny_stock": ([40, 150], [(1, 5, 3), (1, 30, 4), (1, 149, 3)], 7001),
    "flash_tiny_nvfp4": ([33, 90], [(1, 4, 3), (1, 41, 4)], 7002),
}
MIN_REL_MARGIN = gf.MIN_REL_MARGIN


def read_stored(folder: pathlib.Path) -> dict[str, dx.Stored]:
    """Every tensor of the folder's safetensors files, as raw stored bits."""
    out: dict[str, dx.Stored] = {}
    for f in sorted(folder.glob("*.safetensors")):
        raw = f.read_bytes()
        (hlen,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + hlen])
        base = 8 + hlen
        for name, h in header.items():
            if name == "__metadata__":
                continue
            a, b = h["data_offsets"]
            np_dtype = dx._RAW_DTYPES[h["dtype"]][0]
            arr = np.frombuffer(raw[base + a: base + b], dtype=np.dtype(np_dtype).newbyteorder("<"))
            out[name] = dx.Stored(h["dtype"], arr.astype(np_dtype).reshape(h["shape"]))
    return out


def load_main(folder: pathlib.Path, deq: dict[str, np.ndarray]):
    config, model = gf.build_hf(folder)
    hf = dx.official_to_hf(deq, config.num_hidden_layers, config.n_routed_experts)
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in hf.items()}, strict=True)
    return config, model


MTP_EXTRAS = ("e_proj.weight", "h_proj.weight", "enorm.weight", "hnorm.weight", "norm.weight",
              "hc_head_fn", "hc_head_base", "hc_head_scale")


class MtpReference(torch.nn.Module):
    """The MTP layer from the spec, on transformers' modules (see the file docstring)."""

    def __init__(self, folder: pathlib.Path, deq: dict[str, np.ndarray], tmp: pathlib.Path):
        super().__init__()
        cfg = json.loads((folder / "config.json").read_text())
        # The MTP layer as a one-layer model: sliding window, score routing.
        sub = dict(cfg, num_hidden_layers=1, compress_ratios=[0], num_hash_layers=0)
        sub.pop("quantization_config", None)
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "config.json").write_text(json.dumps(sub))
        self.config, self.block_model = gf.build_hf(tmp)
        shutil.rmtree(tmp)
        assert self.config.layer_types == ["sliding_attention"] and self.config.mlp_layer_types == ["moe"]
        mtp = {k[len("mtp.0."):]: v for k, v in deq.items() if k.startswith("mtp.0.")}
        layer = {"layers.0." + k: v for k, v in mtp.items() if k not in MTP_EXTRAS}
        sd = dx.official_to_hf(layer, 1, self.config.n_routed_experts)
        sd["model.embed_tokens.weight"] = deq["embed.weight"]     # shared with the main model
        sd["lm_head.weight"] = deq["head.weight"]                 # shared
        sd["model.norm.weight"] = mtp["norm.weight"]              # the MTP's own
        sd["model.hc_head.hc_fn"] = mtp["hc_head_fn"]
        sd["model.hc_head.hc_base"] = mtp["hc_head_base"]
        sd["model.hc_head.hc_scale"] = mtp["hc_head_scale"]
        self.block_model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()},
                                         strict=True)
        d = self.config.hidden_size
        eps = self.config.rms_norm_eps
        self.e_proj = torch.nn.Linear(d, d, bias=False)
        self.h_proj = torch.nn.Linear(d, d, bias=False)
        self.e_proj.weight.data = torch.from_numpy(np.ascontiguousarray(mtp["e_proj.weight"]))
        self.h_proj.weight.data = torch.from_numpy(np.ascontiguousarray(mtp["h_proj.weight"]))
        self.enorm = hf_mod.DeepseekV4RMSNorm(d, eps)
        self.hnorm = hf_mod.DeepseekV4RMSNorm(d, eps)
        self.enorm.weight.data = torch.from_numpy(mtp["enorm.weight"].copy())
        self.hnorm.weight.data = torch.from_numpy(mtp["hnorm.weight"].copy())
        self._x = None
        self._out = None
        layer0 = self.block_model.model.layers[0]
        layer0.register_forward_pre_hook(lambda mod, args: (self._x,) + tuple(args[1:]))
        self.block_model.model.hc_head.register_forward_pre_hook(self._grab)

    def _grab(self, mod, args):
        self._out = args[0].detach().clone()

    def forward(self, streams: torch.Tensor, next_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """streams [S, N, D], next_ids [S] -> logits [S, V], the block's output streams [S, N, D]."""
        ids = torch.tensor([next_ids])
        e = self.enorm(self.block_model.model.embed_tokens(ids))          # [1, S, D]
        x = self.e_proj(e).unsqueeze(-2) + self.h_proj(self.hnorm(streams.unsqueeze(0)))
        self._x = x.contiguous()
        logits = self.block_model(ids, use_cache=False).logits[0].float()
        return logits, self._out[0]


def main_streams(model, toks: list[int]) -> torch.Tensor:
    """The main model's streams before hc_head [S, N, D] (input of hc_head)."""
    grabbed = {}
    hs = [model.model.hc_head.register_forward_pre_hook(
              lambda mod, args: grabbed.setdefault("x", args[0].detach().clone())),
          model.model.layers[-1].register_forward_hook(
              lambda mod, args, out: grabbed.setdefault("layer", out.detach().clone()))]
    out = model(torch.tensor([toks]), use_cache=False, output_hidden_states=True)
    for h in hs:
        h.remove()
    x = grabbed["x"][0]
    if not torch.equal(grabbed["layer"][0], x):
        raise RuntimeError("the last decoder layer's output is not the input of hc_head")
    # output_hidden_states ends with norm(hc_head(X)), not X (see the docstring).
    final = model.model.norm(model.model.hc_head(grabbed["x"]))
    if out.hidden_states[-1].shape != final.shape or not torch.allclose(out.hidden_states[-1], final):
        raise RuntimeError("output_hidden_states[-1] is no longer norm(hc_head(X)): recheck which output is X")
    return x


def top_margin(logits: torch.Tensor) -> float:
    top = torch.topk(logits, 2).values
    return float((top[0] - top[1]) / logits.abs().max())


def run(name: str) -> None:
    folder = FIXTURES / name
    seq_lens, chains, seed = CASES[name]
    stored = read_stored(folder)
    deq = dx.dequantize_checkpoint(stored)
    config, model = load_main(folder, deq)
    mtp = MtpReference(folder, deq, folder / "_mtp_ref_tmp").eval()
    vocab = config.vocab_size
    out_dir = folder / "expected" / "mtp"
    for attempt in range(20):
        rng = np.random.default_rng(seed + attempt)
        seqs = []
        for n in seq_lens:
            toks = rng.integers(2, vocab, size=n).tolist()
            toks[0] = config.bos_token_id
            seqs.append(toks)
        probe = gf.MarginProbe(mtp.block_model, mtp.config)
        probe.topk = mtp.config.index_topk
        # The main model's choices on these sequences need safe margins too.
        main_probe = gf.MarginProbe(model, config)
        main_probe.topk = config.index_topk
        entries, chain_entries, results = [], [], {}
        min_chain_margin = math.inf
        with torch.no_grad():
            streams = [main_streams(model, s) for s in seqs]
            for i, toks in enumerate(seqs):
                logits, _ = mtp(streams[i][:-1], toks[1:])
                if not torch.isfinite(logits).all():
                    raise RuntimeError(f"{name}: non-finite MTP logits")
                results[f"seq{i}.bin"] = logits
                entries.append({"tokens": toks, "logits": f"seq{i}.bin", "rows": len(toks) - 1,
                                "max_abs_logit": float(logits.abs().max())})
            for c, (si, prefix, k) in enumerate(chains):
                toks = seqs[si]
                x_in = [streams[si][r] for r in range(prefix)]        # rows 0 .. P-1: main streams
                nxt = list(toks[1:prefix + 1])                         # tokens 1 .. P
                chain_logits, drafts = [], []
                for j in range(k):
                    logits, out = mtp(torch.stack(x_in), nxt)
                    last = logits[-1]
                    chain_logits.append(last)
                    d = int(torch.argmax(last))
                    min_chain_margin = min(min_chain_margin, top_margin(last))
                    drafts.append(d)
                    x_in.append(out[-1])                               # the MTP's own output streams
                    nxt.append(d)
                results[f"chain{c}.bin"] = torch.stack(chain_logits)
                chain_entries.append({"sequence": si, "prefix": prefix, "drafts": drafts,
                                      "logits": f"chain{c}.bin"})
        probe.remove()
        main_probe.remove()
        main_margin = min(main_probe.router, main_probe.indexer)
        if probe.router >= MIN_REL_MARGIN and main_margin >= MIN_REL_MARGIN and min_chain_margin >= 1e-3:
            break
        print(f"  {name} seed {seed + attempt}: margins MTP router {probe.router:.3g}, main {main_margin:.3g}, "
              f"chain {min_chain_margin:.3g}; next seed", flush=True)
    else:
        raise RuntimeError(f"{name}: no token seed with safe margins")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    for fname, t in results.items():
        t.numpy().astype("<f4").tofile(out_dir / fname)
    manifest = {
        "fixture": name,
        "generator": "tools/gen_dsv4_mtp_fixtures.py",
        "oracle": "MTP block from dsv4.md §2.7 on transformers' DeepseekV4 modules, fp32, CPU, eager; "
                  "weights = dequantized stored tensors; main streams = input of hc_head "
                  "(= output_hidden_states[-1])",
        "transformers_version": __import__("transformers").__version__,
        "torch_version": torch.__version__,
        "seed": seed + attempt,
        "vocab_size": vocab,
        "logits_format": "little-endian f32 [rows][vocab_size]",
        "sequences": entries,
        "chains": chain_entries,
        "checks": {"min_mtp_router_rel_margin": probe.router, "min_chain_rel_top2_gap": min_chain_margin,
                   "min_main_router_rel_margin": main_probe.router,
                   "min_main_indexer_rel_margin": main_probe.indexer},
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{name}: MTP oracle, {len(entries)} sequences, {len(chain_entries)} chains, router margin "
          f"{probe.router:.3g}, chain margin {min_chain_margin:.3g}")


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in CASES:
        run(name)


if __name__ == "__main__":
    main()
