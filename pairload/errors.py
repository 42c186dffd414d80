"""The exception types of pairload: every problem a user can fix is a PairloadError subclass.

The CLI turns any PairloadError into a one-line message and exit code 1, with no traceback.
"""


class PairloadError(Exception):
    """Base class for errors caused by input, configuration or environment, with a message fit for users."""


class PairingError(PairloadError):
    """Low and high images could not be paired (unmatched files, duplicate stems, no pairs)."""


class ImageError(PairloadError):
    """An image file could not be decoded or does not fit its partner."""


class ShardError(PairloadError):
    """A shard folder, manifest or shard file is missing, corrupt or of an unknown format."""


class OutputError(PairloadError):
    """An output file cannot be written (the disk is full, the folder is read-only), or writing it would replace a
    file pairload did not write."""


class ConfigError(PairloadError):
    """An option has a value that cannot work (crop larger than images, batch larger than a rank's share)."""


class MissingDependencyError(PairloadError):
    """An optional package (DALI, scikit-image) is needed and not installed."""


class LoaderError(PairloadError):
    """A loader cannot go on: one of its worker processes died, or its shards changed while it ran."""


class DistributedError(PairloadError):
    """Ranks of a distributed job lost each other (a rank stopped, died or is far behind)."""


class WorkerError(LoaderError):
    """A loader worker raised an exception that is not a PairloadError: `type_name` is its type, and
    `remote_traceback` the worker's traceback text (also shown as this error's cause)."""

    def __init__(self, message: str, *, type_name: str = "", remote_traceback: str = ""):
        super().__init__(message)
        self.type_name, self.remote_traceback = type_name, remote_traceback


# an API option a refusal may name -> the command-line flag for it (the CLI's loaders use last_batch='drop')
_CLI_TERMS = (("lower batch_size, or use last_batch='pad' or 'partial'", "lower --batch-size"),
              ("use crop <=", "use --crop <="), ("batch_size=", "--batch-size "), ("batch_size", "--batch-size"),
              ("num_workers=", "--workers "), ("num_workers", "--workers"))


def in_cli_terms(message: str) -> str:
    """A refusal's advice in the command line's words: `--batch-size` where the library says `batch_size`."""
    for api, flag in _CLI_TERMS:
        message = message.replace(api, flag)
    return message
