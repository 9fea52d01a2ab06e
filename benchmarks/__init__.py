"""jaxlab's throughput and latency benchmarks, run from a source checkout (``jaxlab bench AREA``
or ``python -m benchmarks.bench_AREA`` at the checkout root); ``harness`` holds the shared helpers.
Research studies live in ``experiments/``."""
