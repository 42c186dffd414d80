"""`python -m pairload.basicsr`: a BasicSR-family repository's own training, unchanged, on a pairload loader.

Run from the root of such a repository (BasicSR, Restormer, Retinexformer, NAFNet: the folder that holds
`basicsr/train.py`), it imports that repository's `basicsr` (the current folder first on sys.path) and replaces, in
the namespace of its `basicsr.train` module (where `from x import y` bound them), only what makes the training
batches: `create_dataset`/`build_dataset` for the train phase, `EnlargedSampler`, `create_dataloader`/
`build_dataloader` and `CPUPrefetcher`/`CUDAPrefetcher`. Their options, model, training loop (the progressive block
included), validation (its dataset and loader stay theirs), logger and checkpoints run as they are. It also wraps
`parse_options` (to read the parsed options) and the model `create_model`/`build_model` returns (to save the
loader's position beside each training state and load it when they resume). Then it runs their entry point:
`train_pipeline(root_path)` (BasicSR >= 1.3) or `main()` (Restormer, Retinexformer, NAFNet), with sys.argv holding
their arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Callable

from ..errors import ConfigError, PairloadError, ShardError, in_cli_terms
from .batches import BasicSRBatches
from .metrics import add_gt_mean_psnr
from .options import data_parallel_gpus, loader_options, read_options_file
from .versions import torchvision_fix, torchvision_import_failed

USAGE = """usage: python -m pairload.basicsr --shards SHARDS [--shards-split SPLIT] -opt OPTIONS.yml [ARGS...]

Runs the current folder's basicsr/train.py (BasicSR, Restormer, Retinexformer, NAFNet) unchanged, with its
training pairs read from SHARDS (what `pairload pack` wrote from the dataroot_lq/dataroot_gt folders) by a pairload
ram loader; its validation, model, logger and checkpoints stay its own. Every argument but --shards and
--shards-split goes to the repository's own parse_options (-opt or --opt, --launcher pytorch, --auto_resume,
--force_yml, ...).

  --shards SHARDS        the shard folder of the training pairs
  --shards-split SPLIT   the split of SHARDS to train on (default: train)
  --gt-mean-psnr         their validation also reports GT-mean PSNR (psnr_gt_mean), by pairload.evaluate
  --allow-overlap        train even when their validation images show scenes of the training pairs (refused
                         otherwise; `pairload audit` lists them)
"""

# the names a BasicSR-family train.py binds, each with the alternatives the known repositories use
WANTED = {"parse_options": ("parse_options",), "dataset": ("create_dataset", "build_dataset"),
          "dataloader": ("create_dataloader", "build_dataloader"), "sampler": ("EnlargedSampler",),
          "cpu_prefetcher": ("CPUPrefetcher",), "cuda_prefetcher": ("CUDAPrefetcher",),
          "model": ("create_model", "build_model"), "entry": ("train_pipeline", "main")}
# network_g keys that name the model's input (and output) channels in the known repositories' options
IN_CHANNELS = ("in_channels", "inp_channels", "num_in_ch", "in_chans", "img_channel", "in_nc")
OUT_CHANNELS = ("out_channels", "num_out_ch", "out_nc", "in_chans", "img_channel")
SIDECAR_FOLDER = "training_states_pairload"
SIDECAR_FORMAT = "pairload-basicsr-loader"


class RepositoryError(PairloadError):
    """The current folder is not a BasicSR-family repository this command can drive: no basicsr/train.py, one that
    does not import, or one of another shape (a function it needs is not found)."""


def main(argv: list[str] | None = None) -> int:
    """The command: their training's exit, or 1 with one line on stderr for a pairload error."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" in argv or "--help" in argv:
        print(USAGE, end="")
        return 0
    try:
        run(argv)
    except PairloadError as exc:
        print(f"pairload.basicsr: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return 1
    return 0


def split_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(our options, their arguments in their order)."""
    parser = argparse.ArgumentParser(prog="python -m pairload.basicsr", add_help=False, allow_abbrev=False)
    parser.add_argument("--shards", action="append")
    parser.add_argument("--shards-split", action="append")
    parser.add_argument("--gt-mean-psnr", action="store_true")
    parser.add_argument("--allow-overlap", action="store_true")
    ours, theirs = parser.parse_known_args(argv)
    for flag, default in (("--shards", None), ("--shards-split", "train")):
        name = flag[2:].replace("-", "_")
        given = getattr(ours, name) or [default]
        if len(given) > 1:  # argparse would keep the last silently
            raise ConfigError(f"{flag} given {len(given)} times ({', '.join(given)}); give it once")
        setattr(ours, name, given[0])
    return ours, theirs


def run(argv: list[str], cwd: Path | None = None) -> None:
    ours, theirs = split_args(argv)
    repo = (cwd or Path.cwd()).resolve()
    train = import_train(repo)
    label = check_options_file(theirs, repo)
    found = find_names(train)
    session = Session(ours.shards, ours.shards_split, gt_mean_psnr=ours.gt_mean_psnr, options_file=label,
                      allow_overlap=ours.allow_overlap)
    session.patch(train, found)
    train_py = Path(train.__file__)
    sys.argv = [str(train_py), *theirs]
    entry = found["entry"]
    with torchvision_refused(train_py):  # some import torchvision only when they log the environment
        if entry == "train_pipeline":
            # what their `if __name__ == '__main__'` passes: the repository root, two levels above train.py
            getattr(train, entry)(str(train_py.resolve().parent.parent))
        else:
            getattr(train, entry)()


OPTION_FLAGS = ("-opt", "--opt")  # how BasicSR-family parse_options name the training YAML


def check_options_file(theirs: list[str], repo: Path) -> str:
    """Their -opt/--opt file, read and checked before their parse_options reads it (which would end in a
    traceback): one a PairedImageDataset train phase pairload can load (`options.read_options_file`, then
    `loader_options`); returns how the command line names it ("-opt Options/x.yml")."""
    flag, path = _options_arg(theirs, repo)
    label = f"{flag} {path}"
    full = repo / path
    if not full.exists():
        raise ConfigError(f"{label}: no such options file in {repo}; pass the training YAML, e.g. "
                          f"{flag} Options/NAME.yml, relative to the repository's root")
    doc = read_options_file(full, label)
    if "--force_yml" not in theirs:  # else their parse_options changes the options it read: checked after it
        run_options(doc, label, lambda _: None)
    return label


def run_options(opt: Mapping, label: str, log: Callable[[str], object]) -> dict:
    """`loader_options` of their options as this command runs them (their progressive block, one shard folder), a
    refusal naming `label`, the options file."""
    where = f"{label}: " if label else ""
    try:
        options = loader_options(opt, progressive="code", log=log)
    except ConfigError as exc:
        raise ConfigError(f"{where}{exc}") from None
    if options.get("degrade_sources"):
        raise ConfigError(f"{where}datasets.train.degrade_sources={list(options['degrade_sources'])}: names sources "
                          "of a mix, and python -m pairload.basicsr trains on one --shards folder, all of whose "
                          "inputs degrade makes; remove degrade_sources")
    return options


def _options_arg(theirs: list[str], repo: Path) -> tuple[str, str]:
    """(the flag, the path) of their -opt/--opt argument; its absence, or a second one (their argparse would take
    the last), is a ConfigError saying what to pass."""
    given = []
    for i, arg in enumerate(theirs):
        flag, eq, value = arg.partition("=")
        if flag in OPTION_FLAGS:
            path = value if eq else (theirs[i + 1] if i + 1 < len(theirs) else "")
            if not path or (not eq and path.startswith("-")):
                raise ConfigError(f"{flag}: no file after it; pass the training YAML, e.g. {flag} Options/NAME.yml, "
                                  f"relative to the repository's root {repo}")
            given.append((flag, path))
    if not given:
        raise ConfigError(f"no -opt: their train.py trains from an options file; pass the training YAML, e.g. -opt "
                          f"Options/NAME.yml, relative to the repository's root {repo}")
    if len(given) > 1:
        raise ConfigError(f"{' and '.join(f'{f} {p}' for f, p in given)}: more than one options file; pass one")
    return given[0]


class ArgumentRefused(Exception):
    """argparse's refusal of their arguments, raised in place of its usage text and exit (`their_argparse`)."""


@contextlib.contextmanager
def their_argparse():
    """argparse refusing an argument raises ArgumentRefused(prog, message) instead of printing its usage and
    exiting, so that the refusal is one line."""
    def error(parser, message):
        raise ArgumentRefused(parser.prog, message)

    saved = argparse.ArgumentParser.error
    argparse.ArgumentParser.error = error
    try:
        yield
    finally:
        argparse.ArgumentParser.error = saved


def import_train(repo: Path):
    """The repository's own `basicsr.train`, imported with `repo` first on sys.path."""
    train_py = repo / "basicsr" / "train.py"
    if not train_py.is_file():
        raise RepositoryError(f"{repo}: no basicsr/train.py here; run python -m pairload.basicsr from the root of a "
                              "BasicSR-family repository (BasicSR, Restormer, Retinexformer, NAFNet: the folder that "
                              "holds basicsr/)")
    if not sys.path or Path(sys.path[0] or ".").resolve() != repo:
        sys.path.insert(0, str(repo))
    try:
        with torchvision_refused(train_py):
            train = importlib.import_module("basicsr.train")
    except ImportError as exc:
        raise RepositoryError(f"{train_py}: importing it failed ({type(exc).__name__}: {exc}); install what the "
                              "repository needs (its requirements.txt; Retinexformer and Restormer also need "
                              "`python setup.py develop --no_cuda_ext` once, which writes basicsr/version.py)"
                              ) from None
    got = Path(train.__file__).resolve()
    if got != train_py.resolve():
        raise RepositoryError(f"basicsr.train was imported from {got}, not {train_py}: another basicsr was imported "
                              "first; run python -m pairload.basicsr in a fresh interpreter from the repository root")
    return train


@contextlib.contextmanager
def torchvision_refused(train_py: Path):
    """Their code failing to import torchvision (one built for another torch, or none) is a RepositoryError of one
    line naming the installed pair and the fix (`versions.torchvision_fix`), not their traceback."""
    try:
        yield
    except Exception as exc:
        if not torchvision_import_failed(exc):
            raise
        raise RepositoryError(f"{train_py}: importing torchvision failed: {torchvision_fix(exc)}") from None


def find_names(train) -> dict[str, str]:
    """{role: the name train.py binds for it}; a missing one is a RepositoryError naming it."""
    out = {}
    for role, names in WANTED.items():
        have = [n for n in names if callable(getattr(train, n, None))]
        if not have:
            raise RepositoryError(f"{train.__file__}: no {' or '.join(names)} found in it; pairload.basicsr drives "
                                  "train.py files shaped like BasicSR's, Restormer's, Retinexformer's or NAFNet's "
                                  "(see docs/basicsr.md for editing another train.py by hand)")
        out[role] = have[0]
    return out


class TrainData:
    """What their `create_dataset`, `EnlargedSampler` and `create_dataloader` return for the train phase: one
    object that is the stand-in dataset (`len()`), the sampler (`set_epoch`) and the loader (`loader`)."""

    def __init__(self, loader, length: int):
        self.loader, self.length = loader, length

    def __len__(self) -> int:
        return self.length

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)


class Prefetcher(BasicSRBatches):
    """Their `CPUPrefetcher`/`CUDAPrefetcher` on the train loader; `on_first_reset` runs once, before the first
    batch is asked."""

    def __init__(self, loader, on_first_reset: Callable[[], None]):
        super().__init__(loader)
        self._first: Callable[[], None] | None = on_first_reset

    def reset(self) -> None:
        if self._first is not None:
            first, self._first = self._first, None
            first()
        super().reset()


class Session:
    """One run: the patches, the loader they share and the loader-position files."""

    def __init__(self, shards: str | None, split: str, *, gt_mean_psnr: bool = False, options_file: str = "",
                 allow_overlap: bool = False):
        self.shards, self.split, self.gt_mean_psnr = shards, split, gt_mean_psnr
        self.allow_overlap = allow_overlap
        self.options_file = options_file  # how the command line names it ("-opt Options/x.yml"), for refusals
        self.opt: Mapping | None = None
        self.loader = None
        self.data: TrainData | None = None
        self.notes: list[tuple[int, str]] = []  # lines logged once their logger exists
        self.resumed = False
        self.logger = logging.getLogger("basicsr.pairload")  # a child of their 'basicsr' logger: its file and rank

    # -- the patches -----------------------------------------------------------------------------------------------

    def patch(self, train, found: dict[str, str]) -> None:
        orig = {role: getattr(train, name) for role, name in found.items()}
        setattr(train, found["parse_options"], self._parse_options(orig["parse_options"]))
        setattr(train, found["dataset"], self._dataset(orig["dataset"]))
        setattr(train, found["sampler"], self._passed_through(orig["sampler"]))
        setattr(train, found["dataloader"], self._passed_through(orig["dataloader"]))
        setattr(train, found["cpu_prefetcher"], self._prefetcher(orig["cpu_prefetcher"]))
        setattr(train, found["cuda_prefetcher"], self._prefetcher(orig["cuda_prefetcher"]))
        setattr(train, found["model"], self._model(orig["model"]))

    def _parse_options(self, orig):
        def parse_options(*args, **kwargs):
            got = self.parsed(orig, *args, **kwargs)
            opt = got[0] if isinstance(got, tuple) else got  # BasicSR >= 1.3 returns (opt, args)
            self.setup(opt)
            return got
        return parse_options

    def parsed(self, orig, *args, **kwargs):
        """Their parse_options(...); an argument their argparse refuses, or their parser failing on the options
        file (what `check_options_file` cannot foresee: a key of their own it needs, a value of the wrong type), is
        a ConfigError of one line."""
        try:
            with their_argparse():
                return orig(*args, **kwargs)
        except ArgumentRefused as exc:
            prog, message = exc.args
            raise ConfigError(f"{prog}: {message}; every argument but --shards, --shards-split and --gt-mean-psnr "
                              "goes to their parse_options: see python basicsr/train.py -h") from None
        except Exception as exc:  # noqa: BLE001 - their parser's own failure, said in one line
            where = self.options_file or "their options file"
            what = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            raise ConfigError(f"{where}: their parse_options failed on it ({what}); most often a key their parser "
                              "reads is missing or of the wrong type: compare the file with the repository's own "
                              "training option files") from None

    def _dataset(self, orig):
        def create_dataset(dataset_opt, *args, **kwargs):
            if not self._is_train(dataset_opt):
                return orig(dataset_opt, *args, **kwargs)  # validation: their own dataset
            self._flush_notes()
            return self.data
        return create_dataset

    def _passed_through(self, orig):
        """Their `EnlargedSampler` or `create_dataloader`: given the stand-in, the stand-in itself (it is the
        sampler and the loader too); given their validation dataset, theirs."""
        def wrapped(dataset, *args, **kwargs):
            return dataset if dataset is self.data and dataset is not None else orig(dataset, *args, **kwargs)
        return wrapped

    def _prefetcher(self, orig):
        def prefetcher(loader, *args, **kwargs):
            if loader is self.data and loader is not None:
                return Prefetcher(self.loader, self._check_resumed)
            return orig(loader, *args, **kwargs)
        return prefetcher

    def _model(self, orig):
        def create_model(*args, **kwargs):
            model = orig(*args, **kwargs)
            self.hook_model(model)
            return model
        return create_model

    def _is_train(self, dataset_opt) -> bool:
        datasets = self.opt.get("datasets", {}) if self.opt is not None else {}
        return dataset_opt is datasets.get("train") or (isinstance(dataset_opt, Mapping)
                                                         and dataset_opt.get("phase") == "train")

    # -- the loader ------------------------------------------------------------------------------------------------

    def setup(self, opt) -> None:
        """Check the options and the shards and make the loader, right after their parse_options (before their
        experiment folders are made)."""
        if not isinstance(opt, Mapping) or not isinstance(opt.get("datasets"), Mapping):
            raise RepositoryError(f"parse_options returned {type(opt).__name__}, expected the options dict (with "
                                  "datasets:); pairload.basicsr drives train.py files shaped like BasicSR's")
        self.opt = opt
        if self.gt_mean_psnr and add_gt_mean_psnr(opt, lambda line: self.notes.append((logging.WARNING, line))):
            self.notes.append((logging.INFO, "pairload: validation reports psnr_gt_mean (pairload.evaluate."
                                             "gt_mean_psnr) before the options' own metrics"))
        where = f"{self.options_file}: " if self.options_file else ""
        notes: list[str] = []
        options = run_options(opt, self.options_file, notes.append)
        self.notes += [(logging.INFO, f"pairload: {n}") for n in notes]
        if not self.shards:
            raise ConfigError(f"no --shards: {pack_hint(opt['datasets']['train'])}")
        device = self._device(opt)
        from ..loaders import make_loader

        try:
            loader = make_loader("ram", self.shards, split=self.split, device=device, **options)
        except ShardError as exc:
            if f"no split {self.split!r}" in str(exc):
                raise ShardError(f"{exc}; name the split to train on with --shards-split") from None
            raise
        except ConfigError as exc:
            per_gpu = options["batch_size"] // data_parallel_gpus(opt)
            raise ConfigError(f"{where}datasets.train gt_size {options['crop']}, batch_size_per_gpu {per_gpu}, "
                              f"dataset_enlarge_ratio {options['repeats']} on --shards {self.shards} split "
                              f"{self.split!r}: {in_option_file_terms(exc)}") from None
        self.loader = loader
        check_channels(opt, loader.ds.members, f"--shards {self.shards} split {self.split!r}")
        folders = [d[k] for d in opt["datasets"].values() if isinstance(d, Mapping) and not self._is_train(d)
                   for k in ("dataroot_gt", "dataroot_lq") if isinstance(d.get(k), str) and Path(d[k]).is_dir()]
        if folders and not self.allow_overlap:  # their validation images, by content, against the training pairs
            from ..audit.overlap import ImageFiles, refuse_overlap

            refuse_overlap(loader.ds, ImageFiles(folders), split=self.split, val_split="val",
                           override="--allow-overlap")
        batches = loader.batches_in(0)
        world = options.get("world_size", 1)
        # their train.py counts ceil(len(train_set) * enlarge_ratio / (batch_size_per_gpu * world_size)) iterations
        # per epoch, while pairload drops the last short batch; a length whose count is at most the loader's real
        # batches keeps their epoch loop from ending before total_iter (a smaller count only adds epochs it breaks)
        # (batch_size_per_gpu: under DataParallel a batch has num_gpu times its rows, their count divides by it alone)
        per_gpu = options["batch_size"] // data_parallel_gpus(opt)
        length = max(1, batches * per_gpu * world // options["repeats"])
        theirs = math.ceil(length * options["repeats"] / (per_gpu * world))
        self.data = TrainData(loader, length)
        m = loader.ds.members
        self.notes.insert(0, (logging.INFO, (
            f"pairload: training pairs from {self.shards} split {self.split!r} ({loader.samples} pairs, "
            f"{m.low.dtype}x{m.low.channels} -> {m.high.dtype}x{m.high.channels}) by a ram loader on {device}: crop "
            f"{options['crop']}, batch {options['batch_size']} per rank, rank {options.get('rank', 0)} of {world}, "
            f"repeats {options['repeats']}, augment {options['augment']}, shuffle {options.get('shuffle', True)}, "
            f"seed {options.get('seed', 0)}, {options.get('num_workers', 0)} workers: {batches} batches per epoch "
            f"on this rank; len(train_set) reads {length} so that train.py's count, {theirs} per epoch, is not more")))

    @staticmethod
    def _device(opt: Mapping) -> str:
        if opt.get("num_gpu", 1) == 0:
            return "cpu"
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"BasicSR options num_gpu={opt.get('num_gpu')}: no CUDA device here; set num_gpu: 0 "
                              "to train on the CPU")
        return f"cuda:{torch.cuda.current_device()}"  # the rank's device: their init_dist has set it

    def _flush_notes(self) -> None:
        for level, line in self.notes:
            self.logger.log(level, line)
        self.notes = []

    # -- the loader's position beside their training states ------------------------------------------------------

    def hook_model(self, model) -> None:
        save, resume = getattr(model, "save_training_state", None), getattr(model, "resume_training", None)
        if not callable(save) or not callable(resume):
            self.logger.warning("pairload: the model has no save_training_state/resume_training: the loader's "
                                "position is not saved, and a resumed run restarts its epoch")
            return

        def save_training_state(epoch, current_iter, *args, **kwargs):
            out = save(epoch, current_iter, *args, **kwargs)
            if current_iter != -1 and self.opt.get("rank", 0) == 0:  # -1: their final save, which has no state
                self.save_loader(epoch, current_iter)
            return out

        def resume_training(resume_state, *args, **kwargs):
            out = resume(resume_state, *args, **kwargs)
            self.resume_loader(resume_state)
            return out

        # instance attributes: their BaseModel.save calls self.save_training_state, which finds these first
        model.save_training_state = save_training_state
        model.resume_training = resume_training

    def sidecar(self, current_iter: int, state_file: str | None = None) -> Path:
        """Where the loader's position at `current_iter` goes: `<experiment>/training_states_pairload/<iter>.json`,
        beside their `training_states/<iter>.state` (`state_file` when resuming from a given one). Not inside
        training_states: their auto-resume reads every file name there as an iteration number."""
        if state_file:
            states = Path(state_file).parent
        else:
            paths = self.opt.get("path", {})
            where = paths.get("training_states") or paths.get("experiments_root")
            if not where:
                raise RepositoryError("BasicSR options path: no training_states (set by parse_options for "
                                      "training): pairload.basicsr saves the loader's position beside it")
            states = Path(where)
        return states.parent / SIDECAR_FOLDER / f"{int(current_iter)}.json"

    def save_loader(self, epoch: int, current_iter: int) -> None:
        from ..format.atomic import write_json_atomic

        path = self.sidecar(current_iter)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"format": SIDECAR_FORMAT, "version": 1, "iter": int(current_iter),
                                 "epoch": int(epoch), "loader": self.loader.state_dict()})

    def resume_loader(self, resume_state) -> None:
        self.resumed = True
        if not isinstance(resume_state, Mapping) or "iter" not in resume_state:
            self.logger.warning("pairload: the resume state has no 'iter': the loader starts its epoch from its "
                                "first batch")
            return
        it, epoch = int(resume_state["iter"]), int(resume_state.get("epoch", 0))
        path = self.sidecar(it, self.opt.get("path", {}).get("resume_state"))
        if not path.is_file():
            self.logger.warning(f"pairload: no loader position {path} for iteration {it}: epoch {epoch} restarts from "
                                "its first batch (as BasicSR's own resume does)")
            return
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ShardError(f"{path}: unreadable loader position ({exc}); delete it to restart epoch {epoch} from "
                             "its first batch") from None
        if not isinstance(doc, dict) or doc.get("format") != SIDECAR_FORMAT or not isinstance(doc.get("loader"), dict):
            raise ShardError(f"{path}: not a pairload.basicsr loader position (format {SIDECAR_FORMAT!r}); delete it "
                             f"to restart epoch {epoch} from its first batch")
        saved = (doc.get("iter"), doc["loader"].get("epoch"))
        if saved != (it, epoch):
            raise ShardError(f"{path}: saved at iteration {saved[0]} in epoch {saved[1]}, the training state resumes "
                             f"iteration {it} in epoch {epoch}; delete it to restart epoch {epoch} from its first "
                             "batch")
        self.loader.load_state_dict(doc["loader"])
        done = sum(k for _, k in doc["loader"]["consumed"])
        self.logger.info(f"pairload: the loader resumes epoch {epoch} after its first {done} batches ({path})")

    def _check_resumed(self) -> None:
        resume = self.opt.get("path", {}).get("resume_state") if self.opt is not None else None
        if resume and not self.resumed:
            self.logger.warning(f"pairload: path.resume_state is {resume} but train.py did not call "
                                "model.resume_training: the loader starts its epoch from its first batch")


# the loader's options by the datasets.train keys they come from (`loader_options`), for its refusals' advice
OPTION_KEYS = {"crop": "gt_size", "batch_size": "batch_size_per_gpu", "repeats": "dataset_enlarge_ratio",
               "num_workers": "num_worker_per_gpu", "shuffle": "use_shuffle"}
# advice that names another of the loader's options, said with the options file's keys (BasicSR drops the last
# short batch, as last_batch='drop' does: the other last_batch values have no key there)
OPTION_FIXES = {"batch_size": "lower {flag}, or set datasets.train.dataset_enlarge_ratio: K (K passes over the split "
                              "per epoch, each with new crops)"}


def in_option_file_terms(exc: ConfigError) -> str:
    """A loader refusal said with the datasets.train keys of the options file, as `in_cli_terms` says it with
    flags."""
    if exc.option in OPTION_FIXES:
        exc = ConfigError(exc.problem, option=exc.option, fix=exc.fix, flag_fix=OPTION_FIXES[exc.option],
                          flag_problem=exc.flag_problem)
    return in_cli_terms(exc, {k: f"datasets.train.{v}" for k, v in OPTION_KEYS.items()})


def check_channels(opt: Mapping, members, where: str) -> None:
    """The model's input/output channels (network_g's keys, where given) are the split's."""
    net = opt.get("network_g")
    if not isinstance(net, Mapping):
        return
    for keys, member, side in ((IN_CHANNELS, members.low, "input"), (OUT_CHANNELS, members.high, "target")):
        for key in keys:
            value = net.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value != member.channels:
                raise ConfigError(f"BasicSR options network_g.{key}={value}: the model's {side}s have {value} "
                                  f"channels, {where} has {member.channels}-channel {side}s; pack {value}-channel "
                                  f"images, or set network_g.{key}: {member.channels}")


def pack_hint(train: Mapping) -> str:
    """How to pack the folders `datasets: train:` names, as one sentence ending in the --shards to give."""
    lq, gt = train.get("dataroot_lq"), train.get("dataroot_gt")
    backend = train.get("io_backend")
    kind = backend.get("type") if isinstance(backend, Mapping) else None
    if not lq or not gt or str(lq).lower() == "none":
        return ("pack the training pairs once with `pairload pack FOLDER SHARDS` (FOLDER holding low/ and high/ "
                "folders), then add --shards SHARDS")
    if kind == "lmdb" or str(lq).endswith(".lmdb") or str(gt).endswith(".lmdb"):
        return (f"datasets.train reads LMDB files ({lq}, {gt}), which pairload does not read: pack the image folders "
                "they were made from with `pairload pack FOLDER SHARDS` (FOLDER holding low/ and high/), then add "
                "--shards SHARDS")
    lq_path, gt_path = Path(lq), Path(gt)
    template = train.get("filename_tmpl")
    naming = f" --name-template '{template}'" if template not in (None, "{}") else ""
    if lq_path.parent == gt_path.parent:
        raw = lq_path.parent
        named = [p for p in raw.parts if p not in (".", "..", raw.anchor)][-2:]  # data/LOLv1/Train: LOLv1-Train
        shards = Path("shards", "-".join(named) or "train")
        return (f"pack datasets.train's folders once with `pairload pack {raw} {shards} --low-dir {lq_path.name} "
                f"--high-dir {gt_path.name}{naming}`, then add --shards {shards}")
    return (f"datasets.train's folders {lq} and {gt} are not side by side: link them into one folder and pack it "
            f"once with `mkdir -p raw-train && ln -s {lq_path.resolve()} raw-train/low && ln -s {gt_path.resolve()} "
            f"raw-train/high && pairload pack raw-train shards/train{naming}`, then add --shards shards/train")
