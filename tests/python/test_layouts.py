#!/usr/bin/env python3
"""Every published layout of an H3 block loads, and none is silently misread.

A tiny block (gen_weights --config tiny, block 3) is re-written here, with
the official safetensors package and numpy only (independently of our C
code), in each layout a user may hold:
  original shards  our names, QKV grouped per head [q_h k_h v_h], no
                   qkv_layout entry, shards + model.safetensors.index.json;
  single file      our names, QKV stacked [q; k; v], no qkv_layout entry
                   (Comfy-Org style), with other blocks and non-block tensors;
  diffusers        transformer_blocks.N. + DIFFUSERS below: to_q/to_k/to_v
                   split, ff.net.0.proj rows [up; gate], shards +
                   diffusion_pytorch_model.safetensors.index.json;
each given as a file, an index or a directory (a snapshot root with
transformer/), with and without a name prefix. Then:
 (a) dit_block --cpu --output on each gives the canonical file's output, bit
     for bit, and its summary names the layout and the QKV order's reason;
 (b) a stacked file that does not state its order is refused in one line
     naming --qkv-layout (exit 2), and accepted with --qkv-layout stacked;
 (c) gen_weights --layout writes exactly the names below (diffusers') and
     the bytes this script derives from the canonical file;
 (d) extract_block turns each layout back into the canonical file.

Run alone: $H3_PYTHON tests/python/test_layouts.py build/dit_block build/tools/gen_weights \\
               build/tools/extract_block build/tests/layouts_work
Exit 0 pass, 1 fail, 77 skip (safetensors, numpy or ml_dtypes not importable). Seed: H3_TEST_SEED."""
import json
import os
import shutil
import subprocess
import sys
import time

try:
    import ml_dtypes
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import save_file
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

BLOCK = 3
TOKENS = ["--tokens", "48", "--seed", "11"]
# Our per-block names, and diffusers' (MiniMaxH3Transformer3DModel's
# transformer_blocks.N.*: diffusers' transformer_minimax_h3.py,
# scripts/convert_minimax_h3_to_diffusers.py), written out.
OURS = ["norm1.weight", "norm2.weight", "attn.qkv_proj.weight", "attn.q_norm.weight", "attn.k_norm.weight",
        "attn.out_proj.weight", "mlp.fc1.weight", "mlp.fc2.weight", "adaln_proj.linear.weight",
        "adaln_proj.linear.bias"]
DIFFUSERS = ["norm1.weight", "norm2.weight", "attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight",
             "attn.norm_q.weight", "attn.norm_k.weight", "attn.to_out.0.weight", "ff.net.0.proj.weight",
             "ff.net.2.weight", "adaln_proj.linear.weight", "adaln_proj.linear.bias"]

from checks import FAILS, check


def load(path):
    with safe_open(path, framework="np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata() or {}


# ---------------------------------------------------------------- layouts

def stacked_qkv(g, heads, d):
    """[q_all; k_all; v_all] from grouped rows (head h: q_h, k_h, v_h)."""
    c = g.shape[1]
    return g.reshape(heads, 3, d, c).transpose(1, 0, 2, 3).reshape(3 * heads * d, c)


def diffusers_parts(g, heads, d):
    c = g.shape[1]
    q, k, v = g.reshape(heads, 3, d, c).transpose(1, 0, 2, 3).reshape(3, heads * d, c)
    return q, k, v


def ours_block(canon, qkv):
    """Our names without the blocks.N. part; qkv: 'grouped' or 'stacked'."""
    t = {n: canon[f"blocks.{BLOCK}.{n}"] for n in OURS}
    heads, d = t["attn.qkv_proj.weight"].shape[0] // (3 * 128), 128
    if qkv == "stacked":
        t["attn.qkv_proj.weight"] = stacked_qkv(t["attn.qkv_proj.weight"], heads, d)
    return t


def diffusers_block(canon):
    t = {n: canon[f"blocks.{BLOCK}.{n}"] for n in OURS}
    heads, d = t["attn.qkv_proj.weight"].shape[0] // (3 * 128), 128
    q, k, v = diffusers_parts(t.pop("attn.qkv_proj.weight"), heads, d)
    gate, up = np.split(t.pop("mlp.fc1.weight"), 2)
    out = {"attn.to_q.weight": q, "attn.to_k.weight": k, "attn.to_v.weight": v,
           "ff.net.0.proj.weight": np.concatenate([up, gate]), "ff.net.2.weight": t.pop("mlp.fc2.weight"),
           "attn.norm_q.weight": t.pop("attn.q_norm.weight"), "attn.norm_k.weight": t.pop("attn.k_norm.weight"),
           "attn.to_out.0.weight": t.pop("attn.out_proj.weight")}
    out.update(t)  # norm1, norm2, adaln_proj.linear.*
    return {n: np.ascontiguousarray(out[n]) for n in DIFFUSERS}


def named(block, stack, n=BLOCK):
    return {f"{stack}{n}.{k}": v for k, v in block.items()}


def noise_like(block, rng):
    return {k: rng.standard_normal(v.shape).astype(ml_dtypes.bfloat16) for k, v in block.items()}


def write_shards(folder, tensors, stem, n_shards=3):
    """The tensors over n shards and an index, as save_pretrained lays them out."""
    os.makedirs(folder, exist_ok=True)
    names = sorted(tensors)
    wm = {}
    for s in range(n_shards):
        part = names[s::n_shards]
        fn = f"{stem}-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        save_file({k: tensors[k] for k in part}, os.path.join(folder, fn), metadata={"format": "pt"})
        wm.update({k: fn for k in part})
    total = sum(t.nbytes for t in tensors.values())
    index = os.path.join(folder, f"{stem}.safetensors.index.json")
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f, indent=2)
    return index


# ---------------------------------------------------------------- running

class Tools:
    def __init__(self, dit, gen, ext, work):
        self.dit, self.gen, self.ext, self.work = dit, gen, ext, work

    def run_block(self, weights, *flags):
        out = os.path.join(self.work, "out.safetensors")
        if os.path.exists(out):
            os.remove(out)
        r = subprocess.run([self.dit, "--cpu", "--quiet", "--weights", weights, *TOKENS, "--output", out, *flags],
                           capture_output=True, text=True)
        got = None
        if r.returncode == 0:
            with open(out, "rb") as f:
                got = f.read()
        return r, got


def expect_same(tools, what, weights, want, layout_frags, *flags):
    r, got = tools.run_block(weights, *flags)
    if not check(r.returncode == 0, f"(a) {what}: dit_block exit {r.returncode}: {r.stderr.strip()[-400:]}"):
        return
    check(got == want, f"(a) {what}: output differs from the canonical file's")
    line = next((l for l in r.stderr.splitlines() if l.startswith("  layout: ")), "")
    for frag in layout_frags:
        check(frag in line, f"(a) {what}: summary lacks {frag!r}: {line!r}")
    print(f"  ok  {what:44s} {line.strip()}")


def expect_refused(tools, what, weights, frags, *flags):
    r, _ = tools.run_block(weights, *flags)
    lines = r.stderr.strip().splitlines()
    ok = check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith("dit_block: "),
               f"(b) {what}: exit {r.returncode}, {len(lines)} stderr lines (want 2 and one line): {r.stderr.strip()}")
    for frag in frags:
        ok = check(frag in r.stderr, f"(b) {what}: message lacks {frag!r}: {r.stderr.strip()}") and ok
    if ok:
        print(f"  ok  {what:44s} {lines[0]}")


# ---------------------------------------------------------------- parts

def part_a_b(tools, canon, want, rng):
    w = tools.work
    grouped, stacked, diff = ours_block(canon, "grouped"), ours_block(canon, "stacked"), diffusers_block(canon)
    other = noise_like(grouped, rng)  # another block of the same stack
    refiner = {k: v for k, v in noise_like(grouped, rng).items() if not k.startswith("adaln")}
    pre = "model.diffusion_model."

    # original shards: an index file, a folder, a snapshot root; with and without a prefix
    for p in ["", pre]:
        tensors = {**named(grouped, f"{p}blocks."), **named(other, f"{p}blocks.", BLOCK + 1),
                   **named(refiner, f"{p}token_refiner.blocks.", 0),
                   f"{p}final_layer.norm.weight": canon[f"blocks.{BLOCK}.norm1.weight"]}
        root = os.path.join(w, f"orig{'_pre' if p else ''}")
        index = write_shards(os.path.join(root, "transformer"), tensors, "model")
        frags = ["original shards (index", "QKV grouped (an index file"] + ([f"prefix '{p}'"] if p else [])
        expect_same(tools, f"original shards, index file{', prefix' if p else ''}", index, want, frags,
                    "--block", str(BLOCK))
        expect_same(tools, f"original shards, folder{', prefix' if p else ''}", os.path.dirname(index), want, frags,
                    "--block", str(BLOCK))
        expect_same(tools, f"original shards, snapshot root{', prefix' if p else ''}", root, want, frags,
                    "--block", str(BLOCK))
    expect_refused(tools, "original shards, two blocks, no --block", os.path.join(w, "orig"),
                   ["holds 2 blocks", "--block N"])

    # single files, stacked QKV, no statement of the order: refused, then read with --qkv-layout stacked
    for p in ["", pre]:
        tensors = {**named(stacked, f"{p}blocks."), **named(refiner, f"{p}token_refiner.blocks.", 0)}
        f = os.path.join(w, f"single{'_pre' if p else ''}.safetensors")
        save_file(tensors, f, metadata={"format": "pt"})
        what = f"single file, stacked{', prefix' if p else ''}"
        expect_refused(tools, f"{what}, no hint", f, ["is not stated", "--qkv-layout"])
        expect_same(tools, f"{what}, --qkv-layout stacked", f, want,
                    ["single file", "QKV stacked (--qkv-layout)"] + ([f"prefix '{p}'"] if p else []),
                    "--qkv-layout", "stacked")
        d = os.path.join(w, f"single_dir{'_pre' if p else ''}")
        os.makedirs(d, exist_ok=True)
        shutil.copy(f, os.path.join(d, "minimax_h3_bf16.safetensors"))
        expect_same(tools, f"{what}, its folder", d, want, ["single file"], "--qkv-layout", "stacked")
        # read as grouped it is another block: the order matters
        r, got = tools.run_block(f, "--qkv-layout", "grouped")
        check(r.returncode == 0 and got != want, f"(b) {what} read as grouped gives the same output")
    # a single file that states its order
    f = os.path.join(w, "single_stated.safetensors")
    save_file(named(stacked, "blocks."), f, metadata={"format": "pt", "qkv_layout": "stacked"})
    expect_same(tools, "single file, stacked, __metadata__ says so", f, want, ["QKV stacked (__metadata__"])
    expect_refused(tools, "single file, stacked, flag contradicts", f, ["contradicts", "qkv_layout 'stacked'"],
                   "--qkv-layout", "grouped")

    # diffusers: one file, an index, a snapshot root; with and without a prefix
    for p in ["", pre]:
        tensors = {**named(diff, f"{p}transformer_blocks."),
                   **named({k: v for k, v in noise_like(diff, rng).items() if not k.startswith("adaln")},
                           f"{p}token_refiner.refiner_blocks.", 0),
                   f"{p}norm_out.norm.weight": canon[f"blocks.{BLOCK}.norm1.weight"]}
        frags = ["diffusers", "separate to_q, to_k, to_v", "fc1 [up; gate]"] + ([f"prefix '{p}'"] if p else [])
        f = os.path.join(w, f"diffusers{'_pre' if p else ''}.safetensors")
        save_file(tensors, f, metadata={"format": "pt"})
        expect_same(tools, f"diffusers, one file{', prefix' if p else ''}", f, want, frags)
        root = os.path.join(w, f"diff{'_pre' if p else ''}")
        index = write_shards(os.path.join(root, "transformer"), tensors, "diffusion_pytorch_model")
        expect_same(tools, f"diffusers, index file{', prefix' if p else ''}", index, want, frags + ["index"])
        expect_same(tools, f"diffusers, snapshot root{', prefix' if p else ''}", root, want, frags)
    expect_refused(tools, "diffusers with --qkv-layout", os.path.join(w, "diff"), ["drop the flag"],
                   "--qkv-layout", "stacked")


def part_c(tools, canon, seed):
    """gen_weights --layout: the names spelled out above, the bytes derived here."""
    w = tools.work
    derived = {"original": named(ours_block(canon, "grouped"), "blocks."),
               "single-file": named(ours_block(canon, "stacked"), "model.diffusion_model.blocks."),
               "diffusers": named(diffusers_block(canon), "transformer_blocks.")}
    for layout, want in derived.items():
        out = os.path.join(w, f"gen_{layout}")
        r = subprocess.run([tools.gen, "--config", "tiny", "--seed", str(seed), "--block", str(BLOCK), "--layout",
                            layout, "--out", out], capture_output=True, text=True)
        if not check(r.returncode == 0, f"(c) gen_weights --layout {layout}: {r.stderr.strip()}"):
            continue
        got, metas = {}, []
        if layout == "single-file":
            got, m = load(out)
            metas.append(m)
        else:
            stem = "diffusion_pytorch_model" if layout == "diffusers" else "model"
            with open(os.path.join(out, f"{stem}.safetensors.index.json")) as f:
                wm = json.load(f)["weight_map"]
            for shard in sorted(set(wm.values())):
                t, m = load(os.path.join(out, shard))
                metas.append(m)
                check(all(wm[k] == shard for k in t), f"(c) {layout}: {shard} holds tensors the index puts elsewhere")
                got.update(t)
            check(set(wm) == set(got), f"(c) {layout}: index lists {sorted(set(wm) ^ set(got))} wrongly")
        check(all("qkv_layout" not in m for m in metas), f"(c) {layout}: a shard states qkv_layout: {metas}")
        if layout == "diffusers":
            spelled = {f"transformer_blocks.{BLOCK}.{n}" for n in DIFFUSERS}
            check(set(got) == spelled, f"(c) diffusers names: extra {sorted(set(got) - spelled)}, "
                                       f"missing {sorted(spelled - set(got))}")
        check(set(got) == set(want), f"(c) {layout}: names {sorted(got)} vs {sorted(want)}")
        for k in sorted(set(got) & set(want)):
            check(got[k].dtype == want[k].dtype and got[k].shape == want[k].shape and
                  got[k].tobytes() == want[k].tobytes(), f"(c) {layout}: {k} differs from the derived tensor")
        print(f"  ok  gen_weights --layout {layout:12s} {len(got)} tensors as derived here")


def part_d(tools, canon):
    """extract_block: each layout back to the canonical file."""
    w = tools.work
    for what, src, flags in [("original shards", os.path.join(w, "orig_pre"), ["--block", str(BLOCK)]),
                             ("single file", os.path.join(w, "single_pre.safetensors"), ["--qkv-layout", "stacked"]),
                             ("diffusers", os.path.join(w, "diff_pre"), [])]:
        out = os.path.join(w, "extracted.safetensors")
        r = subprocess.run([tools.ext, "--checkpoint", src, "--out", out, *flags], capture_output=True, text=True)
        if not check(r.returncode == 0, f"(d) extract_block from {what}: {r.stderr.strip()}"):
            continue
        got, meta = load(out)
        check(meta.get("qkv_layout") == "grouped" and meta.get("block") == str(BLOCK),
              f"(d) extract_block from {what}: metadata {meta}")
        check(set(got) == set(canon) and all(got[k].tobytes() == canon[k].tobytes() for k in canon),
              f"(d) extract_block from {what}: not the canonical tensors")
        print(f"  ok  extract_block from {what:30s} canonical, qkv_layout grouped")


def main():
    dit, gen, ext, work = sys.argv[1:5]
    seed_env = os.environ.get("H3_TEST_SEED", "1")  # fixed by default; "random" draws a fresh one
    seed = time.time_ns() % 1000000 if seed_env == "random" else int(seed_env)
    print(f"test_layouts: seed {seed} (set H3_TEST_SEED to repeat)")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tools = Tools(dit, gen, ext, work)
    canon_path = os.path.join(work, "canonical.safetensors")
    r = subprocess.run([gen, "--config", "tiny", "--seed", str(seed), "--block", str(BLOCK), "--out", canon_path],
                       capture_output=True, text=True)
    if r.returncode:
        print(f"FAIL gen_weights: {r.stderr.strip()}")
        return 1
    canon, meta = load(canon_path)
    check(meta.get("qkv_layout") == "grouped", f"canonical metadata {meta}")
    r, want = tools.run_block(canon_path)
    if not check(r.returncode == 0, f"canonical: dit_block exit {r.returncode}: {r.stderr.strip()}"):
        return 1
    rng = np.random.default_rng(seed)
    part_a_b(tools, canon, want, rng)
    part_c(tools, canon, seed)
    part_d(tools, canon)
    if FAILS:
        print(f"test_layouts: {len(FAILS)} FAILED")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print("test_layouts: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
