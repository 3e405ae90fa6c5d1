"""regroup benchmarks: `make bench` (quick) or `BENCH=full make bench`."""
