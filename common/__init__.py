"""Framework-free core of parbench: spec, data, weights, harness, records, report, CLI."""
