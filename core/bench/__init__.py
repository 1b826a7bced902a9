"""A/B benchmarks of speculative decoding: prompt suites, run protocol, statistics, reports."""
