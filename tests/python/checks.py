"""checks.py — the Python tests' bookkeeping: check() prints an expectation that failed (and, where
a test sets show_ok, one that held) and records it in FAILS; a test exits 1 if FAILS is not empty."""

FAILS = []
show_ok = False  # a test whose output lists everything it checked sets checks.show_ok = True


def check(cond, what):
    if not cond:
        print("FAIL " + what)
        FAILS.append(what)
    elif show_ok:
        print("ok   " + what)
    return cond
