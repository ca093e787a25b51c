"""Demonstrations: people's (or a scripted expert's) play, recorded, checked and learned from.

- ``episode.py``: :class:`Episode` (obs, actions, rewards, how it ended, who played) and the
  builder that turns env steps into one;
- ``dataset.py``: the dataset on disk (safetensors per episode + a JSON manifest), its writer and
  its reader, which loads a dataset whole or refuses it with one line (:class:`DatasetError`);
- ``validate.py``: the checks (names, dtypes, shapes, NaN, ranges, sizes, checksums);
- ``spaces.py``: gymnasium spaces as JSON for the manifest;
- ``sources.py``: who plays for ``mqttrl record`` (a ``module:function`` policy, a run's policy);
- ``keyboard.py``: a person at the keyboard or a gamepad (a pygame window, keys, buttons and sticks
  mapped to actions from TOML);
- ``live.py``: a live worker's person-played episodes written to a dataset (``worker.record_demos_to``).

``mqttrl record`` writes datasets, ``mqttrl train --demos DIR`` learns from them
(docs/demonstrations.md).
"""

from mqttrl.demos.dataset import Dataset, DatasetWriter, check_fits, read_dataset
from mqttrl.demos.episode import Episode, EpisodeBuilder
from mqttrl.demos.validate import DatasetError

__all__ = ["Dataset", "DatasetError", "DatasetWriter", "Episode", "EpisodeBuilder", "check_fits", "read_dataset"]
