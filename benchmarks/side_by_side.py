"""Former home of the side-by-side helpers; kept as an alias of ``harness`` for branches that
still import it. New code imports ``jaxlab.benchmarks.harness``."""

from jaxlab.benchmarks.harness import (  # noqa: F401
    PEER_PY,
    REPO,
    peer_available,
    run_peer,
    steady_rate,
)
