"""The env's spec: where it was before it moved below the config (``mqttrl.config.env_spec``), so
that the run config can carry it without an import circle; these names stay importable here."""

from mqttrl.config.env_spec import (
    SPEC_VERSION,
    EnvSpec,
    SpecError,
    SpecMismatch,
    check_env_against,
    made_by,
    spec_of,
    spec_of_config,
    with_spec,
)

__all__ = [
    "SPEC_VERSION",
    "EnvSpec",
    "SpecError",
    "SpecMismatch",
    "check_env_against",
    "made_by",
    "spec_of",
    "spec_of_config",
    "with_spec",
]
