"""Benchmarks (not tests): printed ratios and counts. Run with ``make bench`` (or ``python -m bench``)."""
