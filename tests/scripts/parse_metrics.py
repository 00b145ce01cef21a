#!/usr/bin/env python3
"""Parses a Prometheus text exposition (stdin) with the `prometheus_client` package's parser
(PyPI; `scripts/setup-debian.sh` installs it) and prints its samples as JSON:
{"families": {name: type}, "samples": [{"name", "labels", "value"}]}. A parse error exits 1.
Used by tests/system/metrics.rs, so the control plane's /metrics is read by the reference
parser rather than by our own."""
import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families


def main():
    text = sys.stdin.read()
    families, samples = {}, []
    try:
        for family in text_string_to_metric_families(text):
            families[family.name] = family.type
            for s in family.samples:
                value = s.value
                if math.isinf(value):
                    value = "+Inf" if value > 0 else "-Inf"
                samples.append({"name": s.name, "labels": s.labels, "value": value})
    except Exception as e:  # the parser raises ValueError and others on bad input
        print(f"unparseable exposition: {e!r}", file=sys.stderr)
        sys.exit(1)
    json.dump({"families": families, "samples": samples}, sys.stdout)


if __name__ == "__main__":
    main()
