"""The package version, in one place (the face and saved checkpoints read it)."""

__version__ = "0.1.0"
