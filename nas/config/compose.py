"""``compose_app``: any command's composed config, as the command line would compose it (tests, notebooks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra import compose, initialize_config_dir

from nas.config.common import CONF_DIR, normalize_overrides
from nas.config.export import register_export_configs
from nas.config.predict import register_predict_configs
from nas.config.profile import register_profile_configs
from nas.config.search import register_search_configs
from nas.config.space import register_space_configs
from nas.config.supernet import register_supernet_configs
from nas.config.train import register_train_configs
from nas.config.validate import register_validate_configs

__all__ = ["compose_app", "register_all_configs"]


def register_all_configs() -> None:
    """Store every command's schema in Hydra's ConfigStore (idempotent): what ``compose_app`` composes from."""
    for register in (register_space_configs, register_profile_configs, register_predict_configs,
                     register_validate_configs, register_search_configs, register_train_configs,
                     register_export_configs, register_supernet_configs):
        register()


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
    register_all_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=app, overrides=normalize_overrides(list(overrides)))
