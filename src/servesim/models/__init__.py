"""Model architectures from Hugging Face config.json files; bundled configs of popular models."""

from servesim.models.arch import (
    ALIASES,
    SUPPORTED_MODEL_TYPES,
    ModelArch,
    ParamCount,
    bundled_models,
    load_model,
    parse_config,
)

__all__ = [
    "ALIASES",
    "SUPPORTED_MODEL_TYPES",
    "ModelArch",
    "ParamCount",
    "bundled_models",
    "load_model",
    "parse_config",
]
