#!/usr/bin/python3
"""Reads a running `moestream serve`'s /metrics with Prometheus's own Python
parser (Debian: python3-prometheus-client) and fails unless every family
parses with its declared type and has samples.

usage: check_metrics.py URL   (e.g. http://127.0.0.1:8080; --api-key: KEY env)"""
import os
import sys
import urllib.request

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    sys.exit("check_metrics.py: needs prometheus_client (apt-get install python3-prometheus-client)")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    req = urllib.request.Request(sys.argv[1].rstrip("/") + "/metrics")
    if os.environ.get("KEY"):
        req.add_header("Authorization", "Bearer " + os.environ["KEY"])
    text = urllib.request.urlopen(req, timeout=10).read().decode()
    declared = {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE ")}
    bad = []
    seen = 0
    for fam in text_string_to_metric_families(text):
        seen += 1
        # prometheus_client names a counter family without its _total.
        name = fam.name + "_total" if fam.type == "counter" and fam.name + "_total" in declared else fam.name
        if name not in declared:
            bad.append(f"{fam.name}: undeclared family (type {fam.type})")
        elif declared[name] != fam.type:
            bad.append(f"{name}: declared {declared[name]}, parsed as {fam.type}")
        if not fam.samples:
            bad.append(f"{name}: no samples")
    if seen != len(declared):
        bad.append(f"{len(declared)} families declared, {seen} parsed")
    for b in bad:
        print("check_metrics.py: " + b, file=sys.stderr)
    if bad:
        sys.exit(1)
    print(f"check_metrics.py: {seen} families, all typed as declared and non-empty")


main()
