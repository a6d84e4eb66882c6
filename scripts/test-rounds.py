#!/usr/bin/env python3
"""Runs the test executables of some packages again under other transports.

Reads cargo's JSON messages (`cargo test --workspace --no-run --message-format=json`) on stdin,
picks the test executables of the packages named by --packages, and runs each of them once per
round (`NAME=VALUE` of an environment variable), from its package's directory as `cargo test`
does. The executables are the ones `cargo test --workspace` built: a `cargo test -p` of fewer
packages unifies features differently and would compile them again (minutes each round).
Exits non-zero at the first failing executable.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--packages", nargs="+", required=True)
    ap.add_argument("--round", action="append", required=True, help="NAME=VALUE, once per round")
    args = ap.parse_args()
    bins = []
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("{"):
            continue
        m = json.loads(line)
        if m.get("reason") != "compiler-artifact" or not m.get("executable"):
            continue
        if not m.get("profile", {}).get("test"):
            continue
        name = m["package_id"]
        # package_id: "path+file:///.../crates/rest#tern-rest@0.1.0" (or the older "name ver (src)").
        pkg = name.split("#")[-1].split("@")[0] if "#" in name else name.split(" ")[0]
        if "#" in name and "@" not in name.split("#")[-1]:
            pkg = os.path.basename(name.split("#")[0])
        if pkg not in args.packages:
            continue
        bins.append((pkg, m["manifest_path"], m["executable"], m["target"]["name"]))
    missing = set(args.packages) - {b[0] for b in bins}
    if missing:
        print(f"test-rounds: no test executables for {sorted(missing)}", file=sys.stderr)
        return 2
    for r in args.round:
        key, _, value = r.partition("=")
        for pkg, manifest, exe, target in bins:
            env = dict(os.environ)
            env[key] = value
            env["CARGO_MANIFEST_DIR"] = os.path.dirname(manifest)
            env["CARGO_PKG_NAME"] = pkg
            print(f"     Running [{r}] {pkg} {target} ({exe})", flush=True)
            t0 = time.time()
            rc = subprocess.call([exe], cwd=os.path.dirname(manifest), env=env)
            print(f"     [{r}] {pkg} {target}: exit {rc} in {time.time() - t0:.1f}s", flush=True)
            if rc != 0:
                return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
