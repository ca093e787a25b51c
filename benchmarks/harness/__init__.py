"""What the benchmarks share, one job a module.

Comparisons: :mod:`.scenario` (what a comparison runs), :mod:`.mqttrl_side` and :mod:`.sb3_side`
(one runner per library), :mod:`.figures` (a run's figures from its curve), :mod:`.results` (the
JSON under ``benchmarks/results/``), :mod:`.plots`. Machines and processes: :mod:`.machine`,
:mod:`.procs` (nodes and a mosquitto to kill and restart), :mod:`.link` (a TCP proxy that slows
or breaks a link), :mod:`.netns` (hosts as network namespaces), :mod:`.learner_host`, :mod:`.xvfb`.

The last four are also the tests' (``tests/test_hosts.py``, ``tests/test_slow_links.py``, ...):
tools for driving a deployment on one machine, not library code, so they live here rather than
in the wheel (``ip netns`` needs root), and not under ``tests/`` so that a benchmark never imports
a test module. ``python -m pytest`` from the repository root imports them as ``benchmarks.harness``.
"""
