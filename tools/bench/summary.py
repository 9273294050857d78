#!/usr/bin/env python3
"""summary.py — the compact table at the end of run_all.sh.

    python3 tools/bench/summary.py OUT_DIR STEPS_TSV [SUMMARY_JSON]

Reads OUT_DIR/{bench_attn,peers_attention,torch_block,dit_block,compare}.json (and the _fp8, _fp8fast, _fp8mix ones) (each may be
missing) and the step status file (name, status, seconds per line), prints attention ms/TFLOPS
per S per implementation with peer/ours time ratios, the accuracy rows, the block times
(PyTorch eager, torch.compile, ours) and the failed steps; writes SUMMARY_JSON (default
OUT_DIR/bench_summary.json) with the summary and every tool's JSON under "raw".
"""
import json, os, sys

from h3cli import Parser

ap = Parser(description=__doc__.strip().splitlines()[0])
ap.add_argument("out_dir", help="the folder holding the tools' JSON files")
ap.add_argument("steps_tsv", help="run_all.sh's step status file (name, status, seconds per line)")
ap.add_argument("summary_json", nargs="?", help="where to write the summary (default OUT_DIR/bench_summary.json)")
args = ap.parse_args()
out, status_file = args.out_dir, args.steps_tsv
summary_path = args.summary_json or os.path.join(out, "bench_summary.json")
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except Exception:
        return None
ba, pa, tb, db, cmp_, db8, cmp8, dbm, cmpm, dbf, cmpf = (
    load(n) for n in ("bench_attn.json", "peers_attention.json", "torch_block.json", "dit_block.json", "compare.json",
                      "dit_block_fp8.json", "compare_fp8.json", "dit_block_fp8mix.json", "compare_fp8mix.json",
                      "dit_block_fp8fast.json", "compare_fp8fast.json"))
steps = [l.rstrip("\n").split("\t") for l in open(status_file) if l.strip()]
summary = {"steps": [{"step": s[0], "status": s[1], "seconds": int(s[2])} for s in steps]}

# attention: {impl: {S: (ms, tflops, status)}}
att = {}
for r in (ba or {}).get("results", []):
    if r.get("kernel", "").startswith("qk_norm_rope_quant"):
        continue
    att.setdefault(r["kernel"], {})[r["S"]] = (r.get("median_ms"), r.get("tflops"), r.get("status"))
for r in (pa or {}).get("results", []):
    att.setdefault(r["impl"], {})[r["S"]] = (r.get("median_ms"), r.get("tflops"), r.get("status"))
ours = [k for k in att if k.startswith("h3_")]
peers = [k for k in att if not k.startswith("h3_")]
Ss = sorted({S for v in att.values() for S in v})
print("\n==================== SUMMARY ====================")
print("attention, H = 56, D = 128 (median ms / TFLOPS; rows 'peer/ours': peer time / our time, > 1 = ours faster)")
hdr = f"{'impl':<22}" + "".join(f"{S:>18}" for S in Ss)
print(hdr)
for k in ours + peers:
    cells = []
    for S in Ss:
        ms, tf, st = att[k].get(S, (None, None, "n/a"))
        cells.append(f"{ms:8.2f}/{tf:6.0f}  " if ms is not None and st == "ok" else f"{(st or 'n/a')[:16]:>18}")
    print(f"{k:<22}" + "".join(f"{c:>18}" for c in cells))
ratios = []
for o in ours:
    for p in peers:
        cells = []
        for S in Ss:
            a, b = att[o].get(S, (None,) * 3), att[p].get(S, (None,) * 3)
            if a[0] and b[0] and a[2] == "ok" and b[2] == "ok":
                cells.append(f"{b[0] / a[0]:.2f}x")
                ratios.append({"ours": o, "peer": p, "S": S, "peer_over_ours": b[0] / a[0]})
            else:
                cells.append("-")
        print(f"{p + '/' + o[3:]:<22}"[:22] + "".join(f"{c:>18}" for c in cells))
summary["attention"] = {k: {str(S): v for S, v in d.items()} for k, d in att.items()}
summary["attention_ratios"] = ratios
for a in (ba or {}).get("accuracy", []):
    if a.get("status") == "ok":
        print(f"accuracy {a['kernel']:<14} {a['dist']:<10} S={a['S']} H={a['H']}: rel RMS {100 * a['rel_rms']:.3f}%, "
              f"RMSE {a['rmse']:.3e} (bf16 floor {100 * a['bf16_floor_rel_rms']:.3f}%)")
    else:
        print(f"accuracy {a['kernel']:<14} {a['dist']:<10}: {a.get('status')}")
summary["accuracy"] = (ba or {}).get("accuracy")
for r in (ba or {}).get("results", []):
    if r.get("kernel", "").startswith("qk_norm_rope_quant"):
        print(f"{r['kernel']} S={r['S']}: {r.get('median_ms', float('nan')):.3f} ms, "
              f"{r.get('gbs', float('nan')):.0f} GB/s ({r.get('status')})")
if ba:
    print(f"bench_attn selfcheck: {ba.get('selfcheck')}")

print("\nblock (median ms)")
blk = {"torch_eager_ms": (tb or {}).get("eager_ms"), "torch_compile_ms": (tb or {}).get("compile_ms"),
       "ours_ms": (db or {}).get("total_ms"), "S": (tb or {}).get("S") or (db or {}).get("S"),
       "compile_s": (tb or {}).get("compile_s"), "output_rel_rms": (cmp_ or {}).get("rel_rms"),
       "ours_graph_ms": (db or {}).get("graph_ms"), "ours_fp8_ms": (db8 or {}).get("total_ms"),
       "ours_fp8_graph_ms": (db8 or {}).get("graph_ms"), "fp8_output_rel_rms": (cmp8 or {}).get("rel_rms"),
       "ours_fp8mix_ms": (dbm or {}).get("total_ms"), "ours_fp8mix_graph_ms": (dbm or {}).get("graph_ms"),
       "fp8mix_output_rel_rms": (cmpm or {}).get("rel_rms"), "ours_fp8fast_ms": (dbf or {}).get("total_ms"),
       "ours_fp8fast_graph_ms": (dbf or {}).get("graph_ms"), "fp8fast_output_rel_rms": (cmpf or {}).get("rel_rms")}
summary["block"] = blk
def f(x, fmt="{:.2f}"):
    return fmt.format(x) if isinstance(x, (int, float)) else "n/a"
print(f"  PyTorch eager   {f(blk['torch_eager_ms'])}")
print(f"  torch.compile   {f(blk['torch_compile_ms'])}   (compile {f(blk['compile_s'], '{:.0f}')} s)")
print(f"  h3block (ours)  {f(blk['ours_ms'])}   (CUDA graph {f(blk['ours_graph_ms'])})")
print(f"  h3block FP8     {f(blk['ours_fp8_ms'])}   (CUDA graph {f(blk['ours_fp8_graph_ms'])})")
print(f"  h3block fp8:qkv,out {f(blk['ours_fp8mix_ms'])}   (CUDA graph {f(blk['ours_fp8mix_graph_ms'])})")
print(f"  h3block FP8 fast-accum {f(blk['ours_fp8fast_ms'])}   (CUDA graph {f(blk['ours_fp8fast_graph_ms'])})")
for o in ("ours_ms", "ours_fp8_ms", "ours_fp8mix_ms", "ours_fp8fast_ms"):
    if isinstance(blk[o], (int, float)) and blk[o] > 0:
        for k in ("torch_eager_ms", "torch_compile_ms"):
            if isinstance(blk[k], (int, float)):
                print(f"  {o[:-3]} speed-up vs {k[:-3]}: {blk[k] / blk[o]:.2f}x")
print(f"  output rel RMS ours vs PyTorch eager: {f(blk['output_rel_rms'], '{:.4%}')}, "
      f"FP8 mode vs PyTorch eager: {f(blk['fp8_output_rel_rms'], '{:.4%}')}, "
      f"fp8:qkv,out vs PyTorch eager: {f(blk['fp8mix_output_rel_rms'], '{:.4%}')}, "
      f"FP8 fast-accum vs PyTorch eager: {f(blk['fp8fast_output_rel_rms'], '{:.4%}')}")

print("\nsteps")
for s in summary["steps"]:
    print(f"  {s['step']:<18} {s['status']:<24} {s['seconds']:>4} s")
failed = [s["step"] for s in summary["steps"] if s["status"] != "ok"]
# a step can succeed while one of its implementations failed (each is independent): list those too
failed += sorted({f"{k}@S={S}: {v[2]}"[:120] for k, d in att.items() for S, v in d.items() if v[2] != "ok"})
print("failures: " + (", ".join(failed) if failed else "none"))
summary["failures"] = failed
summary["raw"] = {"bench_attn": ba, "peers_attention": pa, "torch_block": tb, "dit_block": db, "compare": cmp_,
                  "dit_block_fp8": db8, "compare_fp8": cmp8, "dit_block_fp8mix": dbm, "compare_fp8mix": cmpm,
                  "dit_block_fp8fast": dbf, "compare_fp8fast": cmpf}
with open(summary_path, "w") as fh:
    json.dump(summary, fh, indent=1)
