"""Benchmarks: not collected by pytest; each writes JSON to results/ and asserts nothing."""
