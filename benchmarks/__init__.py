"""SpecDeck's benchmarks (`make bench`). Results go to docs/benchmarks/.

Every module here whose name starts with ``bench_`` is one benchmark: it defines
``run(report: Report) -> None`` and records numbers through the report. Run all of them
with ``python -m benchmarks``, or some with ``python -m benchmarks startup compat``.
"""
