"""Hydra config schemas (dataclasses): typos and wrong types fail when the config is composed.

Hydra's config root is the shipped ``conf/`` folder (``nas.resources.conf_dir()``).  Targets are the
``target`` group (``conf/target/<name>.yaml``, and the user's ``$HWNAS_HOME/target/<name>.yaml``), selected with
``conf=<name>`` (or ``target=<name>``); each is checked against ``TargetConfig``.  ``conf=here`` is
this machine's own target: ``normalize_overrides`` writes it on first use (``nas.latency.here``)
and names it (``target=here_<slug>``) before Hydra composes.  The schemas are generated from the
library's settings dataclasses (``nas.config.schema.schema_from``); a command turns its composed
config back into those dataclasses once, at its start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra import compose, initialize_config_dir

from nas.config.common import (
    CONF_DIR,
    PredictAppConfig,
    ProfileAppConfig,
    SpaceAppConfig,
    ValidateAppConfig,
    alias_override,
    normalize_overrides,
    register_configs,
)
from nas.config.schema import DeviceConfig, MeasureConfig, TargetConfig, schema_from
from nas.config.search import register_search_configs
from nas.config.supernet import register_supernet_configs
from nas.config.train import register_train_configs

__all__ = [
    "CONF_DIR", "DeviceConfig", "MeasureConfig", "PredictAppConfig", "ProfileAppConfig", "SpaceAppConfig",
    "TargetConfig", "ValidateAppConfig",
    "alias_override", "compose_app", "normalize_overrides", "register_configs", "schema_from",
]


def compose_app(app: str, overrides: Sequence[str] = ()) -> Any:
    """The composed config of one command (``"search"``, ``"train"``, ...) for the overrides a user
    would type: Hydra's compose API behind the same aliases as the command line.

    Args:
        app: a primary config's name in ``conf/`` (``"search"``, ``"train"``, ``"profile"``, ...).
        overrides: the overrides as typed (``conf=cpu``, ``evaluator=train``, ``n_trials=8``).

    Returns:
        The composed ``DictConfig``.

    Raises:
        hydra.errors.ConfigCompositionException: an unknown group option; omegaconf's
            ``ValidationError`` / ``ConfigKeyError``: a wrong type or an unknown key.
    """
    register_configs()
    register_search_configs()
    register_train_configs()
    register_supernet_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=app, overrides=normalize_overrides(list(overrides)))
