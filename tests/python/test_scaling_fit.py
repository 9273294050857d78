#!/usr/bin/env python3
"""tools/bench/scaling_fit.py on times made here from known parts:
 (a) times exactly a + b·H·S + c·H·S²: the fit gives a, b, c back (1e-6) with
     standard errors of ~0, and the table prints them in µs, ns per row, µs
     per CTA and TFLOPS, and the peer's time over ours;
 (b) times off the model by a known ±1% pattern: a, b, c within their own
     reported standard errors times 4, and the largest residual near 1%;
     on 400 draws of 1% Gaussian noise the spread of each estimate is its
     mean reported standard error within 20%;
 (c) launches below --min-rows, bench_attn rows that are not ours or the
     lab's, and rows whose status is not ok are left out of the fit (each
     planted far off the model);
 (d) a missing file, a JSON of another tool: exit 2 with one line on stderr;
     files with no ok rows: exit 1.

Run alone: python3 tests/python/test_scaling_fit.py tools/bench/scaling_fit.py WORKDIR
Exit 0 pass, 1 fail."""
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys

import checks
from checks import FAILS, check

checks.show_ok = True
script, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)

SEQS = (2048, 4096, 8192)
HEADS = (1, 6, 12, 28, 56, 112)
MIN_ROWS = 4096 * 28  # two launches sit exactly on it (S = 2048, H = 56 and S = 4096, H = 28): they count
# realistic parts: tens of µs a launch, ~0.25 ns a row (~6 µs a CTA), ~1,000 TFLOPS
OURS = (0.065, 2.4e-7, 512 / (1000 * 1e9))
PEER = (0.024, 1.0e-7, 512 / (960 * 1e9))


def model(p, S, H):
    a, b, c = p
    return a + b * H * S + c * H * S * S


def wiggle(i):
    """a fixed pattern in [-1%, +1%] (no RNG: the test must read the same every run)"""
    return 0.01 * ((i * 7919) % 201 - 100) / 100


def write(name, doc):
    path = os.path.join(work, name)
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def run(*args):
    p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


ours_rows, peer_rows = [], []
for i, (S, H) in enumerate((S, H) for H in HEADS for S in SEQS):
    ours_rows.append({"kernel": "h3_fp8_sm90_vs", "S": S, "H": H, "median_ms": model(OURS, S, H), "status": "ok"})
    ours_rows.append({"kernel": "lab_v161", "S": S, "H": H, "median_ms": model(OURS, S, H) * 0.99, "status": "ok"})
    ours_rows.append({"kernel": "h3_fp8_sm90", "S": S, "H": H, "median_ms": 1e3, "status": "ok"})  # (c): not ours
    peer_rows.append({"impl": "cudnn_fp8", "S": S, "H": H, "median_ms": model(PEER, S, H) * (1 + wiggle(i)),
                      "status": "ok"})
# (c): a failed row far off, and a small launch far off (below --min-rows)
peer_rows.append({"impl": "cudnn_fp8", "S": 16384, "H": 56, "median_ms": 1e3, "status": "error: x"})
ours_rows.append({"kernel": "h3_fp8_sm90_vs", "S": 1024, "H": 1, "median_ms": 5.0, "status": "ok"})
fo = write("ours.json", {"tool": "bench_attn", "results": ours_rows})
fp = write("peers.json", {"tool": "peers_attention", "results": peer_rows})
out_json = os.path.join(work, "fit.json")
rc, out, err = run(fo, fp, "--min-rows", str(MIN_ROWS), "--json", out_json)
check(rc == 0, f"scaling_fit exits 0 (got {rc}; {err.strip()[:200]})")
if rc == 0:
    doc = json.load(open(out_json))
    fits = doc["fits"]
    check(set(fits) == {"ours", "v161", "cudnn_fp8"}, f"impls ours, v161, cudnn_fp8 (got {sorted(fits)})")
    f = fits["ours"]
    for name, got, want in (("a", f["a_ms"], OURS[0]), ("b", f["b_ms_per_row"], OURS[1]),
                            ("c", f["c_ms_per_pair"], OURS[2])):
        check(abs(got / want - 1) < 1e-6, f"(a) exact times: {name} = {got:.6e} back as {want:.6e}")
    check(max(f["se"][0] / OURS[0], f["se"][1] / OURS[1], f["se"][2] / OURS[2]) < 1e-6,
          f"(a) exact times: standard errors ~0 (relative {[s / p for s, p in zip(f['se'], OURS)]})")
    n_fit = sum(1 for H in HEADS for S in SEQS if H * S >= MIN_ROWS)
    check(f["points"] == n_fit, f"(c) the fit takes the {n_fit} launches with H·S >= {MIN_ROWS} (got {f['points']})")
    v = fits.get("v161") or {"a_ms": 0.0}
    check(abs(v["a_ms"] / (0.99 * OURS[0]) - 1) < 1e-6, "(a) the lab row is its own implementation (a scaled 0.99)")
    p = fits.get("cudnn_fp8") or {"a_ms": 1, "b_ms_per_row": 1, "c_ms_per_pair": 1, "se": [0, 0, 0],
                                  "max_rel_resid": 0}
    for j, (name, key) in enumerate((("a", "a_ms"), ("b", "b_ms_per_row"), ("c", "c_ms_per_pair"))):
        err_j = abs(p[key] - PEER[j])
        check(err_j <= 4 * p["se"][j] and p["se"][j] > 0,
              f"(b) ±1% times: {name} = {p[key]:.4e} within 4 standard errors ({p['se'][j]:.2e}) of {PEER[j]:.4e}")
    check(0.005 < p["max_rel_resid"] < 0.02, f"(b) the largest residual is near 1% ({100 * p['max_rel_resid']:.2f}%)")
    # the ratio column: the peer's time over ours at one point, as printed
    S, H = 4096, 56
    t_o = model(OURS, S, H)
    t_p = next(r["median_ms"] for r in peer_rows if (r["S"], r["H"]) == (S, H) and r["status"] == "ok")
    line = next((ln for ln in out.splitlines() if ln.split()[:2] == [str(S), str(H)]), "")
    check(f"({t_p / t_o:5.3f})" in line, f"(a) the table's ratio at S = {S}, H = {H} is {t_p / t_o:.3f}: {line.strip()}")
    row = next((ln.split() for ln in out.splitlines() if ln.startswith("ours ")), [])
    # ours: a 65 µs, b 0.24 ns a row = 6.08 µs a CTA of 192 rows on 132 SMs, c 1000 TFLOPS
    check(row[2:3] == ["65.0"], f"(a) a printed in µs, 65.0: {' '.join(row)}")
    check(row[5:6] == ["0.2400"], f"(a) b printed in ns per row, 0.2400: {' '.join(row)}")
    check(row[8:9] == ["6.08"], f"(a) b printed per 192-row CTA on 132 SMs, 6.08 µs: {' '.join(row)}")
    check(row[9:10] == ["1000.0"], f"(a) c printed as the pairs' TFLOPS, 1000.0: {' '.join(row)}")

# (b) the standard errors against the spread of the estimates themselves
spec = importlib.util.spec_from_file_location("scaling_fit", script)
sf = importlib.util.module_from_spec(spec)
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
spec.loader.exec_module(sf)
rng = random.Random(int(os.environ.get("H3_TEST_SEED", "1")))
pts = [(S, H) for H in HEADS for S in SEQS if H * S >= MIN_ROWS]
est, ses = [], []
for _ in range(400):
    f, _why = sf.fit([(S, H, model(PEER, S, H) * (1 + rng.gauss(0, 0.01))) for S, H in pts])
    est.append((f["a"], f["b"], f["c"]))
    ses.append(f["se"])
for j, name in enumerate("abc"):
    ratio = statistics.pstdev(e[j] for e in est) / statistics.mean(s[j] for s in ses)
    check(0.8 <= ratio <= 1.25, f"(b) {name}: spread over 400 noisy fits / its mean standard error = {ratio:.2f}")

# (d) bad input
rc, out, err = run(os.path.join(work, "missing.json"))
check(rc == 2 and len(err.strip().splitlines()) == 1 and "missing.json" in err,
      f"(d) a missing file: exit 2, one line naming it (rc {rc}: {err.strip()})")
other = write("other.json", {"tool": "dit_block", "results": []})
rc, out, err = run(other)
check(rc == 2 and "other.json" in err and "dit_block" in err, f"(d) another tool's JSON: exit 2 (rc {rc}: {err.strip()})")
empty = write("empty.json", {"tool": "peers_attention", "results": [{"impl": "x", "S": 1, "H": 1, "status": "error"}]})
rc, out, err = run(empty)
check(rc == 1 and "no ok rows" in err, f"(d) no ok rows: exit 1 (rc {rc}: {err.strip()})")

print(f"test_scaling_fit: {'FAILED ' + str(len(FAILS)) if FAILS else 'passed'}")
sys.exit(1 if FAILS else 0)
