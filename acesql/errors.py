"""The project's exception hierarchy.

Model-written SQL and model output never raise: their failures come back as data
(`ExecResult.ok`, `MatchResult.reason`, parse results). Exceptions are for
configuration and programmer errors, and each message says what to fix.
"""


class AcesqlError(Exception):
    """Base class of every error this project raises on purpose."""


class ConfigError(AcesqlError):
    """A parameter, a params file or a command-line option is wrong."""


class DataError(AcesqlError):
    """A dataset, database or predictions file is missing or malformed."""


class SqlParseError(AcesqlError):
    """A SQL string could not be parsed or resolved against its schema."""


class StorageError(AcesqlError):
    """An artifact store or DVC remote is unreachable, misconfigured, or holds a bad object."""


class DiskSpaceError(AcesqlError):
    """The disk holds too little free space for what a run will write."""


class ReplicaError(AcesqlError):
    """A database replica could not be handed out, used or restored."""


class DistributedError(AcesqlError):
    """A collective failed: another process of the job stopped or did not answer in time."""
