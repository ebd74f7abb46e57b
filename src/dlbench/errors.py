"""The package's errors, on its ground floor (they import nothing), so that any module can raise
them: a workload's definition a ConfigError, the framework registry a NotApplicable."""


class ConfigError(ValueError):
    """A config value the workflow cannot run; the message names the key."""


class DataError(ValueError):
    """Raw data that cannot be read; the message names the file."""


class NotApplicable(Exception):
    """This sweep point has no meaning here (e.g. DataParallel without GPUs)."""


class FrameworkError(RuntimeError):
    """The framework cannot run this point as asked (e.g. it cannot see the machine's GPUs)."""
