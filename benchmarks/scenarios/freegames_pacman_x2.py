"""freegames' Pacman sped up twice by libfaketime (``configs/freegames_pacman_dqn_x2.toml``), every
side on that config's game: the mqttrl side as ``freegames_pacman``'s, and SB3 DQN, sb3-contrib
QR-DQN and random keys on the same game under libfaketime, each step the worker's period (50 ms
of wall time, 100 ms of game time), 3 greedy episodes an evaluation cut at 1,500 steps (75 s) as
the mqttrl run of 2026-12-04 was. An hour holds about twice the env steps of ``freegames_pacman``;
needs Debian's faketime package besides that scenario's needs."""

from benchmarks.scenarios.freegames_pacman import scenario

CONFIG = "configs/freegames_pacman_dqn_x2.toml"
#: as the x2 run of 2026-12-04 was measured: 3 greedy episodes an evaluation, episodes cut at 1,500 steps
SCENARIO = scenario("freegames Pacman sped up x2, 60 minutes", CONFIG, "FreegamesPacmanX2-v0", 3, 1_500)
