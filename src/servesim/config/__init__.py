"""The config file: schema, loading and error messages."""

from servesim.config.load import load_config
from servesim.config.schema import Config

__all__ = ["Config", "load_config"]
