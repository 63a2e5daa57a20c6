"""The version of operator_kit, written once (the package metadata reads it)."""

__version__ = "0.1.0"
