#!/usr/bin/env python3
"""Regenerates every committed fixture: runs each tools/gen_*.py in name order.

Usage: python3 tools/gen_all.py   (or `make fixtures`)
Each generator is deterministic (fixed seeds) and writes under tests/fixtures/.
"""
import pathlib
import subprocess
import sys

here = pathlib.Path(__file__).resolve().parent
for script in sorted(here.glob("gen_*.py")):
    if script.name == "gen_all.py":
        continue
    print(f"== {script.name}", flush=True)
    subprocess.run([sys.executable, str(script)], check=True, cwd=here.parent)
