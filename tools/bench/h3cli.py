"""h3cli.py — the Python tools' side of h3block's command-line convention (core/opts.h is the C
tools'): --flag VALUE and --flag=VALUE, flags spelt in full (no abbreviations), -h/--help on
stdout with exit 0, --version (version and commit) with exit 0, and one line
"PROG: WHAT (see --help)" with exit 2 for any usage error.

    from h3cli import Parser
    ap = Parser(description="...")      # an argparse.ArgumentParser
"""
import argparse
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def version_text(prog):
    """'PROG (h3block) VERSION' and 'commit COMMIT', as the C tools' --version starts."""
    try:
        with open(os.path.join(ROOT, "VERSION")) as f:
            v = f.read().strip()
    except OSError:
        v = "unknown"
    commit = "unknown"
    try:
        r = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty", "--abbrev=12"],
                           capture_output=True, text=True, timeout=10)
        if r.returncode == 0 and r.stdout.strip():
            commit = r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return f"{prog} (h3block) {v}\ncommit {commit}"


class _Version(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="print the version and the commit, and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text(parser.prog))
        parser.exit(0)


class Parser(argparse.ArgumentParser):
    """argparse with the convention above: no abbreviations, --version, one-line errors."""

    def __init__(self, **kw):
        kw.setdefault("allow_abbrev", False)
        super().__init__(**kw)
        self.add_argument("--version", action=_Version)

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see --help)\n")
