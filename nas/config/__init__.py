"""Hydra config schemas (dataclasses): typos and wrong types fail when the config is composed.

Hydra's config root is the shipped ``conf/`` folder (``nas.resources.conf_dir()``).  Targets are the
``target`` group (``conf/target/<name>.yaml``, and the user's ``$HWNAS_HOME/target/<name>.yaml``), selected with
``conf=<name>`` (or ``target=<name>``); each is checked against ``TargetConfig``.  ``conf=here`` is
this machine's own target: ``normalize_overrides`` writes it on first use (``nas.latency.predict.here``)
and names it (``target=here_<slug>``) before Hydra composes.  The schemas are generated from the
library's settings dataclasses (``nas.config.schema.schema_from``); a command turns its composed
config back into those dataclasses once, at its start.

Each command's schema is in ``nas.config.<command>`` (``<Command>AppConfig`` and its
``register_<command>_configs``); ``common`` holds what they share.
"""

from __future__ import annotations

from nas._lazy import lazy_exports
from nas.config.common import CONF_DIR, alias_override, normalize_overrides, register_configs, user_search_path
from nas.config.predict import PredictAppConfig
from nas.config.profile import ProfileAppConfig
from nas.config.schema import DeviceConfig, MeasureConfig, TargetConfig, schema_from
from nas.config.space import SpaceAppConfig
from nas.config.validate import ValidateAppConfig

__all__ = [
    "CONF_DIR", "DeviceConfig", "MeasureConfig", "PredictAppConfig", "ProfileAppConfig", "SpaceAppConfig",
    "TargetConfig", "ValidateAppConfig",
    "alias_override", "compose_app", "normalize_overrides", "register_all_configs", "register_configs", "schema_from",
    "user_search_path",
]

# every command's schemas, for tests and notebooks; a command registers only its own, so that
# nas.profile's config loads no Optuna
__getattr__, __dir__ = lazy_exports(__name__, {"compose_app": "compose", "register_all_configs": "compose"})
