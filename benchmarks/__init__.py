"""jaxlab's benchmarks, shipped as ``jaxlab.benchmarks`` (run one with ``jaxlab bench AREA`` or
``python benchmarks/bench_AREA.py`` from a checkout); ``harness`` holds the shared helpers."""
