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
    """An option has a value that cannot work (crop larger than images, batch larger than a rank's share).

    `option`: the API name of the option to change ("batch_size"), when one is at fault; `fix`: the advice, kept
    apart from the problem (the message is "problem; fix"). Where options are command-line flags (`in_cli_terms`)
    `flag_problem` and `flag_fix` say the same with `{flag}` standing for the option's flag."""

    def __init__(self, message: str, *, option: str | None = None, fix: str | None = None,
                 flag_fix: str | None = None, flag_problem: str | None = None):
        super().__init__(f"{message}; {fix}" if fix else message)
        self.problem, self.option, self.fix = message, option, fix
        self.flag_fix, self.flag_problem = flag_fix, flag_problem

    @classmethod
    def for_value(cls, option: str, value, expected: str, **kwargs) -> "ConfigError":
        """A refused value: "option=value: expected …" (on a command line "--flag value: expected …")."""
        shown = str(value).replace("{", "{{").replace("}", "}}")
        return cls(f"{option}={value}: {expected}", option=option, flag_problem=f"{{flag}} {shown}: {expected}",
                   **kwargs)

    def __reduce__(self):  # keyword-only fields survive pickling (errors raised in worker processes)
        return _config_error, (type(self), self.problem, self.option, self.fix, self.flag_fix, self.flag_problem)


def _config_error(cls, message, option, fix, flag_fix, flag_problem):
    return cls(message, option=option, fix=fix, flag_fix=flag_fix, flag_problem=flag_problem)


class EvaluationError(PairloadError):
    """Images given to an evaluation metric or to whole-image inference (`pairload.evaluate`) cannot be compared or
    run: an output and its target differ in shape, an image is too small for the metric's window, a model returned
    another size than expected."""


class MissingDependencyError(PairloadError):
    """An optional package (DALI, scikit-image) is needed and not installed."""


class WorkerDiedError(PairloadError):
    """A worker process of `pack`, `make-pairs` or `audit` died while it worked (the out-of-memory killer, a decoder
    crashing on a file): its work is lost, and the command stops."""


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


# an API option a refusal may name -> its command-line flag (the same in every `pairload` command that has it)
FLAGS = {"batch_size": "--batch-size", "crop": "--crop", "num_workers": "--workers"}


def in_cli_terms(exc: PairloadError, flags: dict[str, str] = FLAGS) -> str:
    """`exc`'s message for a command line. A ConfigError that names its option (`option=`) with a flag in `flags`
    is said with that flag: its `flag_problem`, and its `flag_fix` (or "change FLAG" in place of its API advice);
    the message text itself is never rewritten."""
    if not isinstance(exc, ConfigError) or exc.option not in flags:
        return str(exc)
    flag = flags[exc.option]
    problem = exc.flag_problem.format(flag=flag) if exc.flag_problem else exc.problem
    advice = exc.flag_fix.format(flag=flag) if exc.flag_fix else f"change {flag}" if exc.fix else None
    return f"{problem}; {advice}" if advice else problem
