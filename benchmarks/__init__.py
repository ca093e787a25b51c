"""mqttrl's benchmarks: one harness (``benchmarks.harness``), the comparisons as scenarios
(``benchmarks.scenarios``, run by ``python -m benchmarks.run``), their results as JSON
(``benchmarks/results/``) and the special-purpose scripts (throughput, fleets, chaos, ...).

A package, not a folder of scripts, so that the scripts share the harness by import: run each
from the repository root as a module, ``python -m benchmarks.<name>``. Not shipped in the wheel.
"""
