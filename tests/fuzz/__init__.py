"""Fuzzing the trace readers (Kineto, Ascend, Nsight Systems) with inputs grown from real traces.

:mod:`tests.fuzz.harness` holds the targets, the seed corpus (cut from ``../shared/data``) and the
structured mutations; ``tests/test_fuzz_readers.py`` runs a bounded pass in CI; ``python -m
tests.fuzz --seconds 600`` runs the coverage-guided fuzzer (atheris) for longer. See docs/fuzzing.md.
"""
