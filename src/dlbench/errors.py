"""Errors shared by the readers of every workload."""


class DataError(ValueError):
    """Raw data that cannot be read; the message names the file."""
